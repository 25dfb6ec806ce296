-- Structure: roles, schemas and privileges of docs/architecture.md §8 — the runtime role executes the API and touches no table.
begin;
\ir ../fixtures.psql
select plan(21);

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
select is(
  array(select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'ql_api' and has_function_privilege('ql_runtime', p.oid, 'execute') order by 1),
  array['artifact_upload_v1', 'attempt_activation_v1', 'attempt_activation_v2', 'attempt_complete_v1', 'attempt_lease_control_v1',
        'attempt_lease_control_v2',
        'bundle_chunk_v1', 'notify_deliveries_v1', 'notify_rule_list_v1', 'notify_rule_remove_v1',
        'notify_rule_set_v1', 'offer_pull_v1', 'output_append_v1', 'output_lost_v1', 'project_view_v1', 'project_workers_v1',
        'request_admission_v1',
        'request_admission_v2', 'run_cancel_request_v1', 'run_enqueue_v1', 'run_list_v1', 'run_output_v1',
        'run_timeline_v1', 'run_timeline_v2', 'schedule_preview_v1', 'secret_delete_v1', 'secret_list_v1',
        'secret_rewrap_page_v1', 'secret_rewrap_v1', 'secret_set_v1', 'storage_health_v1', 'subject_admission_v1',
        'subject_projects_v1', 'task_list_v1', 'task_revision_create_v1', 'task_schedule_change_v1',
        'task_status_change_v1',
        'worker_certificate_expiry_v1', 'worker_session_heartbeat_v1', 'worker_session_open_v1'],
  'ql_runtime executes exactly the shell''s API (not convergence, not policy changes)');
select is(
  array(select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname in ('ql', 'ql_api') and has_function_privilege('ql_scheduler', p.oid, 'execute') order by 1),
  array['converge', 'converge_grace_floor_v1', 'lease_expiry_reconcile_v1', 'output_expire_v1', 'partitions_ensure_v1',
        'prune_v1', 'retain', 'retention_cycle_v1', 'retention_maintain_v1', 'run_cancellation_converge_v1',
        'schedule_fire_v1', 'schedule_next_fire_v1', 'schedule_tick'],
  'ql_scheduler executes exactly converge, its page functions and the floor of its grace, retain and the functions it '
  'calls, and the scheduler''s tick and what it calls');
select is(
  array(select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname in ('ql', 'ql_api') and has_function_privilege('ql_notify', p.oid, 'execute') order by 1),
  array['notify_claim_v1', 'notify_prune_v1', 'notify_result_v1', 'notify_worker_scan_v1'],
  'ql_notify (the dispatcher) executes exactly its claim, result, Worker scan and prune functions');
select is((select count(*)::int from pg_class c join pg_namespace n on n.oid = c.relnamespace
           cross join unnest(array['select', 'insert', 'update', 'delete', 'truncate']) p
           where n.nspname in ('ql', 'ql_api') and c.relkind in ('r', 'v', 'm', 'S', 'p')
             and has_table_privilege('ql_notify', c.oid, p)), 0,
          'ql_notify has no privilege on any table');
select ok(not has_function_privilege('ql_runtime', 'ql_api.role_binding_set_v1(uuid,uuid,text,boolean)', 'execute')
          and not has_function_privilege('ql_scheduler', 'ql_api.role_binding_set_v1(uuid,uuid,text,boolean)', 'execute'),
          'only the owner (an operator acting as DBA) changes role bindings');
select ok((select rolcanlogin and not rolsuper and not rolcreaterole and not rolcreatedb
           from pg_roles where rolname = 'ql_scheduler'), 'ql_scheduler logs in (pg_cron connects as it) with no special attribute');
select is((select count(*)::int from pg_class c join pg_namespace n on n.oid = c.relnamespace
           cross join unnest(array['select', 'insert', 'update', 'delete', 'truncate']) p
           where n.nspname in ('ql', 'ql_api') and c.relkind in ('r', 'v', 'm', 'S', 'p')
             and has_table_privilege('ql_scheduler', c.oid, p)), 0,
          'ql_scheduler has no privilege on any table');
select is((select array_agg(p.oid::regprocedure::text order by 1) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
           where n.nspname = 'ql_api' and p.prokind = 'f'
             and not (p.prosecdef and p.proconfig = array['search_path=pg_catalog, pg_temp'])), null,
          'every ql_api function is SECURITY DEFINER with search_path = pg_catalog, pg_temp');
select is(array(select p.proname || ':' || p.prosecdef || ':' || (p.proconfig is null) from pg_proc p
                join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'ql_api' and p.prokind = 'p'
                order by 1),
          array['converge:false:true', 'retain:false:true', 'schedule_tick:false:true'],
                  'the three procedures, converge, retain and schedule_tick, are SECURITY INVOKER with no SET clause (they '
                  'COMMIT between pages)');

set local role ql_runtime;
select throws_ok('select count(*) from ql.runs', '42501', 'permission denied for schema ql',
                 'the runtime role reading a table is refused');
select throws_ok($$select ql.now_ms()$$, '42501', 'permission denied for schema ql',
                 'the runtime role calling a private helper is refused');
reset role;

select * from finish();
rollback;
