-- Structure: roles, schemas and privileges of ARCHITECTURE §8 — the runtime role executes the API and touches no table.
begin;
\ir ../fixtures.psql
select plan(14);

select has_role('ql_owner', 'ql_owner exists');
select has_role('ql_runtime', 'ql_runtime exists');
select ok(not (select rolcanlogin from pg_roles where rolname = 'ql_owner'), 'ql_owner cannot log in');
select ok((select rolcanlogin and not rolsuper and not rolcreaterole and not rolcreatedb
           from pg_roles where rolname = 'ql_runtime'), 'ql_runtime logs in with no special attribute');

select is((select count(*)::int from pg_class c join pg_namespace n on n.oid = c.relnamespace
           where n.nspname in ('ql', 'ql_api') and pg_get_userbyid(c.relowner) <> 'ql_owner'), 0,
          'ql_owner owns every table, index, sequence and view');
select is((select count(*)::int from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname in ('ql', 'ql_api') and pg_get_userbyid(p.proowner) <> 'ql_owner'), 0,
          'ql_owner owns every function');

select is((select count(*)::int from pg_class c join pg_namespace n on n.oid = c.relnamespace
           cross join unnest(array['select', 'insert', 'update', 'delete', 'truncate', 'references', 'trigger']) p
           where n.nspname in ('ql', 'ql_api') and c.relkind in ('r', 'v', 'm', 'S', 'p')
             and has_table_privilege('ql_runtime', c.oid, p)), 0,
          'ql_runtime has no privilege on any table');
select ok(not has_schema_privilege('ql_runtime', 'ql', 'usage'), 'ql_runtime cannot even see schema ql');

select is((select array_agg(p.oid::regprocedure::text order by 1) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname in ('ql', 'ql_api') and has_function_privilege('public', p.oid, 'execute')), null,
          'PUBLIC executes no function of ql or ql_api');
select is((select array_agg(p.oid::regprocedure::text order by 1) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'ql' and has_function_privilege('ql_runtime', p.oid, 'execute')), null,
          'ql_runtime executes no private helper');
select is((select array_agg(p.oid::regprocedure::text order by 1) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'ql_api' and not has_function_privilege('ql_runtime', p.oid, 'execute')), null,
          'ql_runtime executes every ql_api function');
select is((select array_agg(p.oid::regprocedure::text order by 1) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'ql_api' and p.prokind = 'f'
             and not (p.prosecdef and p.proconfig = array['search_path=pg_catalog, pg_temp'])), null,
          'every ql_api function is SECURITY DEFINER with search_path = pg_catalog, pg_temp');

set local role ql_runtime;
select throws_ok('select count(*) from ql.runs', '42501', 'permission denied for schema ql',
                 'the runtime role reading a table is refused');
select throws_ok($$select ql.now_ms()$$, '42501', 'permission denied for schema ql',
                 'the runtime role calling a private helper is refused');
reset role;

select * from finish();
rollback;
