-- Tests ql_api.worker_list_v1: every Worker with its online state (a live, unexpired session), last contact and
-- active Attempts; it reads only, and only an operator (the owner) may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(16);

create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(), (select string_agg('worker ' || w::text, E'\n' order by w.id) from ql.workers w));
create function pg_temp.row_of(p_worker uuid) returns jsonb language sql
return (select w from jsonb_array_elements(ql_api.worker_list_v1() -> 'workers') w where w ->> 'workerId' = p_worker::text);

-- Structure: an operator's read, executable by its owner only.
select is_definer('ql_api', 'worker_list_v1', array[]::text[], 'worker_list_v1 runs as its owner (SECURITY DEFINER)');
select function_privs_are('ql_api', 'worker_list_v1', array[]::text[], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not list Workers');
select function_privs_are('ql_api', 'worker_list_v1', array[]::text[], 'ql_scheduler', array[]::text[],
  'the scheduler role may not list Workers');
set local role ql_runtime;
select throws_ok($$select ql_api.worker_list_v1()$$, '42501', 'permission denied for function worker_list_v1',
  'the runtime role calling worker_list_v1 is refused: 42501');
reset role;

select is(ql_api.worker_list_v1(), '{"status": "listed", "workers": []}', 'no Worker: an empty list');

-- A Worker that never connected, and one holding a running Attempt.
select pg_temp.mk_worker() as idle \gset
update ql.workers set name = 'b-idle' where id = :'idle';
select ql.now_ms() as t0 \gset
select pg_temp.mk_scenario() as busy \gset
update ql.workers set name = 'a-busy' where id = :'busy';
select pg_temp.offer_at(:'busy', 'running') as busy_offer \gset
select ql.now_ms() as t1 \gset

select pg_temp.ostate() as before \gset
select is(jsonb_path_query_array(ql_api.worker_list_v1(), '$.workers[*].name'), '["a-busy", "b-idle"]',
  'Workers are listed by name');
select is(array(select jsonb_object_keys(pg_temp.row_of(:'idle')) order by 1),
  array['activeAttempts', 'certNotAfterMs', 'generation', 'lastContactAtMs', 'name', 'online', 'pool', 'status',
        'workerId'],
  'each Worker answers exactly its id, name, pool, generation, status, online, lastContactAtMs, activeAttempts, '
  'certNotAfterMs');
select is(pg_temp.row_of(:'idle') - 'workerId', '{"name": "b-idle", "pool": "default", "generation": 1,
  "status": "active", "online": false, "lastContactAtMs": null, "activeAttempts": 0, "certNotAfterMs": null}',
  'a Worker that never opened a session is offline, never contacted, with no active Attempt, no recorded expiry');
select is((pg_temp.row_of(:'busy') ->> 'online')::boolean, true, 'a Worker with a live, unexpired session is online');
select is((pg_temp.row_of(:'busy') ->> 'activeAttempts')::int, 1, 'its running Attempt is counted');
select ok((pg_temp.row_of(:'busy') ->> 'lastContactAtMs')::bigint between :t0 and :t1,
  'its last contact is the session open (database time during the test)');
select is(pg_temp.ostate(), :'before', 'listing changes nothing');

-- The session expires without a heartbeat: offline, though its status is still live until convergence.
update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1 where worker_id = :'busy';
select is((pg_temp.row_of(:'busy') ->> 'online')::boolean, false, 'a live session past its expiry is offline');
-- The Attempt ends: no longer counted.
update ql.run_attempts set status = 'lost', ended_at_ms = ql.now_ms() where worker_id = :'busy';
select is((pg_temp.row_of(:'busy') ->> 'activeAttempts')::int, 0, 'an ended Attempt is not counted');
-- A closed session is offline; a disabled Worker says so.
update ql.worker_sessions set expires_at_ms = ql.now_ms() + 60000, status = 'closed', ended_at_ms = ql.now_ms()
 where worker_id = :'busy';
select is((pg_temp.row_of(:'busy') ->> 'online')::boolean, false, 'a closed session is offline, even before its expiry');
update ql.workers set status = 'disabled' where id = :'idle';
select is(pg_temp.row_of(:'idle') ->> 'status', 'disabled', 'a disabled Worker is listed as disabled');

select * from finish();
rollback;
