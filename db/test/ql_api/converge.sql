-- Tests ql_api.converge: the one procedure — SECURITY INVOKER without SET (it COMMITs between pages, three kinds:
-- cancellation convergence, lease-expiry recovery, the scheduler), EXECUTE for
-- ql_scheduler only, 22023 on out-of-range bounds and on a grace below the Workers' stop grace + 1 s
-- (ql_api.converge_grace_floor_v1, docs/architecture.md §4 item 10). A CALL inside pgTAP's transaction
-- cannot COMMIT, so here it is shown to fail with 2D000 and leave nothing behind; the committing cycle itself is
-- exercised for real from pytest (autocommit CALL).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(48);

-- ---------------------------------------------------------------------------------------------
-- Structure: a procedure that runs as its caller, with no SET clause, callable by the scheduler role only.
select has_function('ql_api', 'converge', array['integer', 'integer', 'bigint'],
  'converge(page_size, max_pages, grace_ms) exists');
select is_procedure('ql_api', 'converge', array['integer', 'integer', 'bigint'],
  'converge is a PROCEDURE (CALL), so it may COMMIT between pages');
select isnt_definer('ql_api', 'converge', array['integer', 'integer', 'bigint'],
  'converge is SECURITY INVOKER: PostgreSQL refuses COMMIT in a SECURITY DEFINER procedure');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.converge(integer, integer, bigint)'::regprocedure),
  null::text[], 'converge has no SET clause (a SET clause also forbids COMMIT)');
select is((select l.lanname::text from pg_proc p join pg_language l on l.oid = p.prolang
            where p.oid = 'ql_api.converge(integer, integer, bigint)'::regprocedure),
  'plpgsql', 'converge is PL/pgSQL');
select is(pg_get_function_arguments('ql_api.converge(integer, integer, bigint)'::regprocedure),
  'IN p_page_size integer DEFAULT 64, IN p_max_pages integer DEFAULT 16, IN p_grace_ms bigint DEFAULT 30000',
  'CALL ql_api.converge() uses pages of 64, at most 16 pages, and a 30 s grace');
select is((select pg_get_userbyid(p.proowner)::text from pg_proc p
            where p.oid = 'ql_api.converge(integer, integer, bigint)'::regprocedure),
  'ql_owner', 'converge is owned by ql_owner');
select function_privs_are('ql_api', 'converge', array['integer', 'integer', 'bigint'],
  'ql_scheduler', array['EXECUTE'], 'the scheduler role (pg_cron) may execute converge');
select function_privs_are('ql_api', 'converge', array['integer', 'integer', 'bigint'],
  'ql_runtime', array[]::text[], 'the runtime role (the shell) may not execute converge');
select function_privs_are('ql_api', 'converge', array['integer', 'integer', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute converge');
select is(array(select pg_get_userbyid(x.grantee)::text
                  from pg_proc p, aclexplode(p.proacl) x
                 where p.oid = 'ql_api.converge(integer, integer, bigint)'::regprocedure and x.privilege_type = 'EXECUTE'
                 order by 1),
  array['ql_owner', 'ql_scheduler'], 'EXECUTE on converge is held by exactly its owner and ql_scheduler');
-- SECURITY INVOKER: the page functions run with the caller's right to call them, so the scheduler needs all three.
select ok(has_function_privilege('ql_scheduler', 'ql_api.run_cancellation_converge_v1(integer)', 'execute')
          and has_function_privilege('ql_scheduler', 'ql_api.lease_expiry_reconcile_v1(integer, bigint)', 'execute')
          and has_function_privilege('ql_scheduler', 'ql_api.schedule_fire_v1(integer)', 'execute'),
  'as an invoker''s procedure, converge needs the scheduler to hold EXECUTE on its three page functions, and it does');
select ok((select p.prosecdef and p.proconfig = array['search_path=pg_catalog, pg_temp'] from pg_proc p
            where p.oid = 'ql_api.run_cancellation_converge_v1(integer)'::regprocedure)
          and (select p.prosecdef and p.proconfig = array['search_path=pg_catalog, pg_temp'] from pg_proc p
            where p.oid = 'ql_api.lease_expiry_reconcile_v1(integer, bigint)'::regprocedure)
          and (select p.prosecdef and p.proconfig = array['search_path=pg_catalog, pg_temp'] from pg_proc p
            where p.oid = 'ql_api.schedule_fire_v1(integer)'::regprocedure),
  'the three page functions it calls are SECURITY DEFINER with a pinned search_path: all writing happens there');
select ok((select p.prosrc ~ 'ql_api\.run_cancellation_converge_v1\(' and p.prosrc ~ 'ql_api\.lease_expiry_reconcile_v1\('
                  and p.prosrc ~ 'ql_api\.schedule_fire_v1\('
                  and p.prosrc !~ '[^.]\m(run_cancellation_converge_v1|lease_expiry_reconcile_v1|schedule_fire_v1)\('
             from pg_proc p where p.oid = 'ql_api.converge(integer, integer, bigint)'::regprocedure),
  'without a search_path of its own, converge calls the page functions by schema-qualified name only');
set local role ql_runtime;
select throws_ok('call ql_api.converge()', '42501', 'permission denied for procedure converge',
  'the runtime role cannot run a convergence cycle');
select throws_ok('call ql_api.converge(1, 1, 0)', '42501', 'permission denied for procedure converge',
  'the runtime role cannot run a convergence cycle with explicit bounds either');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Work for a cycle to do: a queued Run with a user intent (cancellation convergence would end it) and
-- an expired claim (lease-expiry recovery would abandon it). Every refused CALL below must leave both.
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as cancel_run \gset
select ql.run_cancel_intent(:'cancel_run', 'user', 'user', null, ql.now_ms()) as cancel_seq \gset
select pg_temp.mk_scenario() as w \gset
set local role ql_runtime;
select o, o ->> 'attemptId' as a from pg_temp.offer_at(:'w', 'claimed') o \gset claim_
reset role;
select pg_temp.age_attempt(:'claim_o', 60000);
-- and a schedule due since a minute ago (the scheduler page would enqueue it).
select pg_temp.mk_revision(pg_temp.mk_project()) as sched_rev \gset
select r.task_id as sched_task from ql.task_execution_revisions r where r.id = :'sched_rev' \gset
insert into ql.task_schedules (task_id, project_id, cron, timezone, overlap, next_fire_at_ms, created_at_ms, updated_at_ms)
select t.id, t.project_id, '* * * * *', 'UTC', 'skip', ql.now_ms() - 60000, ql.now_ms(), ql.now_ms()
  from ql.tasks t where t.id = :'sched_task';
select pg_temp.state() || (select string_agg(s::text, ',') from ql.task_schedules s) as before \gset

-- Out-of-range bounds: 22023 before any page runs.
set local role ql_scheduler;
select throws_ok('call ql_api.converge(0, 16, 30000)', '22023',
  'ql_api.converge: bounds out of range (page_size 0, max_pages 16, grace_ms 30000)',
  'page_size 0 is out of range (1..128): 22023');
select throws_ok('call ql_api.converge(129, 16, 30000)', '22023',
  'ql_api.converge: bounds out of range (page_size 129, max_pages 16, grace_ms 30000)',
  'page_size 129 is out of range (1..128): 22023');
select throws_ok('call ql_api.converge(null, 16, 30000)', '22023',
  'ql_api.converge: bounds out of range (page_size , max_pages 16, grace_ms 30000)',
  'a NULL page_size is out of range: 22023');
select throws_ok('call ql_api.converge(64, 0, 30000)', '22023',
  'ql_api.converge: bounds out of range (page_size 64, max_pages 0, grace_ms 30000)',
  'max_pages 0 is out of range (1..64): 22023');
select throws_ok('call ql_api.converge(64, 65, 30000)', '22023',
  'ql_api.converge: bounds out of range (page_size 64, max_pages 65, grace_ms 30000)',
  'max_pages 65 is out of range (1..64): 22023');
select throws_ok('call ql_api.converge(64, null, 30000)', '22023',
  'ql_api.converge: bounds out of range (page_size 64, max_pages , grace_ms 30000)',
  'a NULL max_pages is out of range: 22023');
select throws_ok('call ql_api.converge(64, 16, -1)', '22023',
  'ql_api.converge: bounds out of range (page_size 64, max_pages 16, grace_ms -1)',
  'a negative grace is out of range (0..86400000): 22023');
select throws_ok('call ql_api.converge(64, 16, 86400001)', '22023',
  'ql_api.converge: bounds out of range (page_size 64, max_pages 16, grace_ms 86400001)',
  'a grace above one day is out of range: 22023');
select throws_ok('call ql_api.converge(64, 16, null)', '22023',
  'ql_api.converge: bounds out of range (page_size 64, max_pages 16, grace_ms )',
  'a NULL grace is out of range: 22023');
select throws_ok('call ql_api.converge(-2147483648, -2147483648, -9223372036854775808)', '22023', null,
  'the most negative bounds are refused with 22023, not an overflow');
-- A grace below the floor: a Worker's runner may still be within its stop grace (TERM, the grace, KILL) that long
-- after the Lease expired, so lost (and a retry elsewhere) would come while the task may still run. The floor is
-- ql.settings.worker_stop_grace_ms (5000, the Worker's default stop_grace_seconds) + 1000 (the runner's poll).
select throws_ok('call ql_api.converge(64, 16, 5999)', '22023',
  'ql_api.converge: grace_ms 5999 is below its floor 6000 (ql.settings.worker_stop_grace_ms 5000 + 1000)',
  'a grace 1 ms below the default floor (stop grace 5 s + the runner''s 1 s poll) is refused: 22023');
select throws_ok('call ql_api.converge(64, 16, 0)', '22023',
  'ql_api.converge: grace_ms 0 is below its floor 6000 (ql.settings.worker_stop_grace_ms 5000 + 1000)',
  'a zero grace is refused: 22023');
reset role;
-- The floor follows the setting: a CALL (as the owner) with the Workers' stop grace set, answered by its SQLSTATE and
-- message (the exception block rolls the setting back with the call).
create function pg_temp.converge_with(p_stop_grace_ms bigint, p_grace_ms bigint) returns text language plpgsql as $$
begin
  update ql.settings set worker_stop_grace_ms = p_stop_grace_ms;
  execute format('call ql_api.converge(64, 16, %s)', p_grace_ms);
  return 'no error';
exception when others then
  return sqlstate || ' ' || sqlerrm;
end $$;
select is(pg_temp.converge_with(60000, 30000),
  '22023 ql_api.converge: grace_ms 30000 is below its floor 61000 (ql.settings.worker_stop_grace_ms 60000 + 1000)',
  'with Workers of a 60 s stop grace, even the default 30 s grace is refused: 22023');
select is(pg_temp.converge_with(60000, 61000), '2D000 invalid transaction termination',
  'and a grace at the raised floor passes the check (and reaches the COMMIT)');
select is(pg_temp.converge_with(3600000, 3600999),
  '22023 ql_api.converge: grace_ms 3600999 is below its floor 3601000 (ql.settings.worker_stop_grace_ms 3600000 + 1000)',
  'the longest stop grace a Worker accepts (3600 s) raises the floor to 3601000 ms');
select is(pg_temp.converge_with(1000, 1999),
  '22023 ql_api.converge: grace_ms 1999 is below its floor 2000 (ql.settings.worker_stop_grace_ms 1000 + 1000)',
  'with Workers of a 1 s stop grace the floor is 2000 ms: 1999 is refused');
select is(pg_temp.converge_with(1000, 2000), '2D000 invalid transaction termination', 'and 2000 passes the check');
select throws_ok('update ql.settings set worker_stop_grace_ms = 3600001', '23514', null,
  'the setting takes 0..3600000 ms, the stop grace a Worker accepts (stop_grace_seconds 0..3600)');
select is(pg_temp.state() || (select string_agg(s::text, ',') from ql.task_schedules s), :'before', 'out-of-range bounds raise before any page: nothing changed');
select is((select s.worker_stop_grace_ms from ql.settings s), 5000::bigint,
  'the Workers'' stop grace is 5000 ms unless an operator says otherwise (the Worker''s default)');

-- ---------------------------------------------------------------------------------------------
-- Inside a transaction block the first COMMIT fails (2D000), and the page it followed is rolled back.
set local role ql_scheduler;
select throws_ok('call ql_api.converge()', '2D000', 'invalid transaction termination',
  'CALL inside a transaction block (as here) fails at its first COMMIT: invalid transaction termination');
select throws_ok('call ql_api.converge(1, 1, 6000)', '2D000', 'invalid transaction termination',
  'the smallest bounds (1, 1, the floor 6000) pass the bounds check and reach the COMMIT');
select throws_ok('call ql_api.converge(128, 64, 86400000)', '2D000', 'invalid transaction termination',
  'the largest bounds (128, 64, 86400000) pass the bounds check and reach the COMMIT');
reset role;
select is(pg_temp.state() || (select string_agg(s::text, ',') from ql.task_schedules s), :'before',
  'a CALL that cannot COMMIT leaves nothing behind: the first page''s cancellation is rolled back with it');
select results_eq(format($$select r.status::text, r.cancel_reason::text from ql.runs r where r.id = %L$$, :'cancel_run'),
  $$values ('queued'::text, 'user'::text)$$,
  'the Run with an intent is still queued with its intent, for the next (autocommit) cycle');
select is((select a.status::text from ql.run_attempts a where a.id = :'claim_a'), 'claimed',
  'the expired claim is still claimed, for the next (autocommit) cycle');
select is((select count(*)::int from ql.schedule_fires f where f.task_id = :'sched_task'), 0,
  'the due schedule is still unhandled, for the next (autocommit) cycle');

-- The same pages called directly (as a cycle would, without the COMMITs) do the work: the refusals above
-- were the transaction block, not the absence of work.
set local role ql_scheduler;
select ql_api.run_cancellation_converge_v1(64) as page_c, ql_api.lease_expiry_reconcile_v1(64, 30000) as page_l \gset
select ql_api.schedule_fire_v1(64) as page_s \gset
reset role;
select is(:'page_c'::jsonb, jsonb_build_object('status', 'ok', 'scanned', 1, 'converged', 1, 'blocked', 0,
                                               'convergedRunIds', jsonb_build_array(:'cancel_run'), 'blockedRunIds', '[]'::jsonb),
  'the cancellation page a cycle starts with converges the Run with the intent');
select is(:'page_l'::jsonb, '{"status": "ok", "scanned": 1, "abandoned": 1, "lost": 0, "retryScheduled": 0, "failed": 0, "requeued": 0}'::jsonb,
  'the recovery page a cycle continues with abandons the expired claim');
select is((select r.status::text from ql.runs r where r.id = :'cancel_run'), 'cancelled',
  'the Run with the intent is cancelled by the page');
select is((select a.status::text from ql.run_attempts a where a.id = :'claim_a'), 'abandoned',
  'the expired claim is abandoned by the page');
select is(:'page_s'::jsonb, '{"status": "ok", "scanned": 1, "enqueued": 1, "skipped": 0, "duplicates": 0}'::jsonb,
  'the scheduler page a cycle ends with enqueues the due schedule''s fire time');

select * from finish();
rollback;
