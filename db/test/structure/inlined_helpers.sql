-- Structure: the helpers that state one fact inside queries (ql.is_terminal, ql.max_safe_integer, ql.session_fence)
-- are what the planner inlines: one-expression SQL functions, not SECURITY DEFINER, no SET clause, immutable or
-- stable. Made otherwise, the renewal's WHERE and the overlap check would call them per row and lose their indexes.
begin;
\ir ../fixtures.psql
select plan(3);

select is(
  array(select p.oid::regprocedure::text || ':' || l.lanname::text || ':' || p.provolatile::text || ':' || p.prosecdef || ':'
               || (p.proconfig is null) || ':' || (p.prosqlbody is not null)
        from pg_proc p join pg_language l on l.oid = p.prolang
        where p.oid in ('ql.is_terminal(text)'::regprocedure, 'ql.max_safe_integer()'::regprocedure,
                        'ql.session_fence(ql.worker_sessions, uuid, bigint, bigint)'::regprocedure)
        order by 1),
  array['ql.is_terminal(text):sql:i:false:true:true', 'ql.max_safe_integer():sql:i:false:true:true',
        'ql.session_fence(ql.worker_sessions,uuid,bigint,bigint):sql:s:false:true:true'],
  'the three inlined helpers: SQL bodies, immutable or stable, invoker, no SET');
select has_function('ql', 'run_create', array['uuid', 'ql.task_execution_revisions', 'ql.actor_kind', 'uuid', 'jsonb', 'bigint'],
  'ql.run_create, the one insert of a new Run');
select is((select count(*)::int from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'ql' and p.proname in ('is_terminal', 'max_safe_integer', 'session_fence', 'run_create')),
          4, 'each helper exists once (no overloads)');

select * from finish();
rollback;
