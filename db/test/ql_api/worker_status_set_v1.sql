-- Tests ql_api.worker_status_set_v1: disabling a Worker (by id or name) closes its live session, so the Attempt it
-- holds is fenced and no new session opens; enabling lets it in again; refusals (unknown, ambiguous, null) change
-- nothing; only an operator (the owner) may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(22);

create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(), (select string_agg('worker ' || w::text, E'\n' order by w.id) from ql.workers w));

-- Structure: an operator's command, executable by its owner only.
select is_definer('ql_api', 'worker_status_set_v1', array['text', 'boolean'], 'worker_status_set_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'worker_status_set_v1', array['text', 'boolean'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not disable a Worker');
select function_privs_are('ql_api', 'worker_status_set_v1', array['text', 'boolean'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not disable a Worker');

-- A Worker holding a running Attempt, and two Workers one of which is named by the other's id (names are unique,
-- ql/unique_names: that is the one ambiguity left).
select pg_temp.mk_scenario() as busy \gset
update ql.workers set name = 'ws-busy' where id = :'busy';
select pg_temp.offer_at(:'busy', 'running') as o \gset
select (:'o'::jsonb ->> 'sessionId')::uuid as session \gset
select pg_temp.mk_worker() as twin1 \gset
select pg_temp.mk_worker() as twin2 \gset
update ql.workers set name = :'twin1' where id = :'twin2';

set local role ql_runtime;
select throws_ok(format('select ql_api.worker_status_set_v1(%L, false)', :'busy'), '42501',
  'permission denied for function worker_status_set_v1', 'the runtime role calling it is refused: 42501');
reset role;

-- Refusals change nothing.
select pg_temp.ostate() as before \gset
select is(ql_api.worker_status_set_v1(null, false), '{"status": "invalid", "reason": "name"}', 'a NULL Worker is invalid');
select is(ql_api.worker_status_set_v1('', false), '{"status": "invalid", "reason": "name"}', 'an empty name is invalid');
select is(ql_api.worker_status_set_v1('ws-busy', null), '{"status": "invalid", "reason": "active"}',
  'a NULL status is invalid');
select is(ql_api.worker_status_set_v1('ws-nobody', false), '{"status": "not_found", "reason": "worker"}',
  'an unknown name is not found');
select is(ql_api.worker_status_set_v1(gen_random_uuid()::text, false), '{"status": "not_found", "reason": "worker"}',
  'an unknown id is not found');
select is(ql_api.worker_status_set_v1(:'twin1', false),
  jsonb_build_object('status', 'invalid', 'reason', 'name', 'detail', format('2 Workers match %L: name one by its id', :'twin1')),
  'a Worker''s id that is another Worker''s name is refused, with the count');
select is(pg_temp.ostate(), :'before', 'the refused calls change nothing');

-- Disable by name: the Worker is disabled, its live session closed.
select ql_api.worker_status_set_v1('ws-busy', false) as disabled \gset
select is(:'disabled'::jsonb, jsonb_build_object('status', 'disabled', 'workerId', :'busy'::uuid, 'name', 'ws-busy',
  'changed', true, 'closedSessionId', :'session'::uuid), 'disabling answers the Worker and the session it closed');
select results_eq(format('select status from ql.worker_sessions where worker_id = %L', :'busy'),
  $$values ('closed'::text)$$, 'its live session is closed');
-- The fence: its Attempt calls and a new session are refused.
set local role ql_runtime;
select is(pg_temp.lease(:'busy', :'session', :'o'::jsonb, 3) - 'detail', '{"status": "fenced", "reason": "stale_session"}',
  'the Attempt it holds is fenced at once (stale_session)');
select is(ql_api.worker_session_open_v1(:'busy', 1, sha256(convert_to('cert-a', 'UTF8')), 4),
  '{"status": "fenced", "reason": "worker_disabled"}', 'a disabled Worker cannot open a session');
reset role;

-- Disabling again changes nothing.
select pg_temp.ostate() as before \gset
select is(ql_api.worker_status_set_v1(:'busy', false), jsonb_build_object('status', 'disabled', 'workerId', :'busy'::uuid,
  'name', 'ws-busy', 'changed', false, 'closedSessionId', null), 'disabling a disabled Worker (by id) answers changed false');
select is(pg_temp.ostate(), :'before', 'and changes nothing');

-- Enable by id (upper case): it may open a session again; its generation is unchanged.
select is(ql_api.worker_status_set_v1(upper(:'busy'), true) - 'workerId', '{"status": "enabled", "name": "ws-busy",
  "changed": true, "closedSessionId": null}', 'enabling by id answers enabled');
select is((select status from ql.workers where id = :'busy'), 'active', 'the Worker is active again');
set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'busy', 1, sha256(convert_to('cert-a', 'UTF8')), 4) ->> 'status', 'opened',
  'an enabled Worker opens a session');
reset role;

-- A twin by its id works, and only that twin changes.
select is(ql_api.worker_status_set_v1(:'twin2', false) ->> 'status', 'disabled', 'a twin is disabled by its id');
select results_eq(format('select status from ql.workers where id = %L', :'twin1'), $$values ('active'::text)$$,
  'the other twin is untouched');

select * from finish();
rollback;
