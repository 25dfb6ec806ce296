-- Tests ql_api.attempt_lease_control_v2: a renewal that takes the running ACK along (docs/decisions/0031) — the flip on
-- the fast path and on the full path (a replay, a deadline passed), what it never flips, and v1 as v2 without it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(42);

create function pg_temp.lease2(p_worker uuid, p_session uuid, o jsonb, p_version bigint, p_running boolean,
                               p_token text default 'token-a')
returns jsonb language sql
return ql_api.attempt_lease_control_v2(p_worker, p_session, 1, (o->>'projectId')::uuid, (o->>'runId')::uuid,
  (o->>'attemptId')::uuid, (o->>'offerId')::uuid, (o->>'leaseGeneration')::bigint,
  sha256(convert_to(p_token, 'UTF8')), p_version, p_running);

-- The Attempt as a renewal may change it: (status, version, callback_sequence, running_at_ms is set, lease version).
create function pg_temp.attempt(o jsonb) returns text language sql
return (select (a.status, a.version, a.callback_sequence, a.running_at_ms is not null, l.version)::text
          from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id where a.id = (o ->> 'attemptId')::uuid);

-- ---------------------------------------------------------------------------------------------
-- Structure.
select has_function('ql_api', 'attempt_lease_control_v2',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'boolean'],
  'lease control v2 exists with its fence parameters and the running flag');
select is_definer('ql_api', 'attempt_lease_control_v2',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'boolean'],
  'lease control v2 is SECURITY DEFINER');
select is((select p.proconfig from pg_proc p where p.oid =
            'ql_api.attempt_lease_control_v2(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, boolean)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'lease control v2 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'attempt_lease_control_v2',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'boolean'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute lease control v2');
select function_privs_are('ql_api', 'attempt_lease_control_v2',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'boolean'],
  'public', array[]::text[], 'PUBLIC may not execute lease control v2');

-- ---------------------------------------------------------------------------------------------
-- A: the fast path flips a starting Attempt to running with the renewal, once; its replay flips nothing more.
select pg_temp.mk_scenario() as a_w \gset
set local role ql_runtime;
select o as a_o, o ->> 'sessionId' as a_s, o ->> 'runId' as a_r from pg_temp.offer_at(:'a_w', 'starting') o \gset
reset role;
select pg_temp.attempt(:'a_o') as before, (select r::text from ql.runs r where r.id = :'a_r') as run_before,
       (select count(*) from ql.run_events e where e.run_id = :'a_r') as events_before, ql.now_ms() as t0 \gset
select is(:'before'::text, '(starting,2,1,f,1)', 'A starts starting, Lease version 1');
set local role ql_runtime;
select pg_temp.lease2(:'a_w', :'a_s', :'a_o', 1, true) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res'::jsonb ->> 'status', 'renewed', 'a renewal with running answers renewed');
select is(pg_temp.attempt(:'a_o'), '(running,3,2,t,2)',
  'the renewal moved the Attempt to running (version and callback sequence +1, running_at_ms) and the Lease to 2');
select ok((select a.running_at_ms between :t0 and :t1 from ql.run_attempts a where a.id = (:'a_o'::jsonb ->> 'attemptId')::uuid),
  'running_at_ms is database time of the renewal');
select is((select r::text from ql.runs r where r.id = :'a_r'), :'run_before', 'the Run is not written (as by a running ACK)');
select is((select count(*) from ql.run_events e where e.run_id = :'a_r'), :'events_before'::bigint,
  'no event is written (as by a running ACK)');
select is((select (a.running_at_ms = (:'res'::jsonb ->> 'renewedAtMs')::bigint) from ql.run_attempts a
            where a.id = (:'a_o'::jsonb ->> 'attemptId')::uuid), true, 'running_at_ms is the renewal''s renewedAtMs');
select pg_temp.state() as st \gset
set local role ql_runtime;
select pg_temp.lease2(:'a_w', :'a_s', :'a_o', 1, true) as replay \gset
reset role;
select is(:'replay'::jsonb ->> 'leaseVersion', '2', 'its replay answers the stored renewal');
select is(pg_temp.state(), :'st', 'its replay writes nothing: the Attempt is already running');
set local role ql_runtime;
select pg_temp.lease2(:'a_w', :'a_s', :'a_o', 2, true) as res \gset
reset role;
select is(pg_temp.attempt(:'a_o'), '(running,3,2,t,3)',
  'running on a running Attempt renews the Lease alone (the ACK''s replay)');
set local role ql_runtime;
select is(pg_temp.activate('running', :'a_w', :'a_s', :'a_o') ->> 'status', 'already_running',
  'a running ACK after it answers already_running');
reset role;

-- ---------------------------------------------------------------------------------------------
-- B: what it never flips, and what it refuses.
select pg_temp.mk_scenario() as b_w \gset
set local role ql_runtime;
select o as b_o, o ->> 'sessionId' as b_s from pg_temp.offer_at(:'b_w', 'claimed') o \gset
reset role;
select pg_temp.state() as st \gset
set local role ql_runtime;
select is(pg_temp.lease2(:'b_w', :'b_s', :'b_o', 1, true), '{"status": "fenced", "reason": "state_drift"}',
  'running on a claimed Attempt (no starting ACK) is fenced state_drift');
select is(pg_temp.lease2(:'b_w', :'b_s', :'b_o', 1, null), '{"status": "invalid", "reason": "running"}',
  'a NULL running flag is invalid (running)');
reset role;
select is(pg_temp.state(), :'st', 'neither changed anything');
set local role ql_runtime;
select is(pg_temp.lease2(:'b_w', :'b_s', :'b_o', 1, false) ->> 'status', 'renewed', 'without running a claimed Attempt renews');
reset role;
select is(pg_temp.attempt(:'b_o'), '(claimed,1,0,f,2)', 'and stays claimed');
set local role ql_runtime;
select is(pg_temp.activate('starting', :'b_w', :'b_s', :'b_o') ->> 'status', 'applied', 'B starts');
select is(pg_temp.lease2(:'b_w', :'b_s', :'b_o', 2, true, 'token-b'), '{"status": "fenced", "reason": "token_mismatch"}',
  'running under another token is fenced');
select is(pg_temp.lease2(:'b_w', :'b_s', :'b_o', 5, true), '{"status": "fenced", "reason": "stale_version"}',
  'running with a stale version is fenced');
reset role;
select is(pg_temp.attempt(:'b_o'), '(starting,2,1,f,2)', 'a fenced running flag flips nothing');
set local role ql_runtime;
select is(pg_temp.lease(:'b_w', :'b_s', :'b_o', 2) ->> 'status', 'renewed', 'v1 renews B');
reset role;
select is(pg_temp.attempt(:'b_o'), '(starting,2,1,f,3)', 'v1 is v2 without running: the Attempt stays starting');

-- ---------------------------------------------------------------------------------------------
-- C: under a cancel intent the renewal answers stop_requested and still records that the process exists.
select pg_temp.mk_scenario() as c_w \gset
set local role ql_runtime;
select o as c_o, o ->> 'sessionId' as c_s, o ->> 'runId' as c_r from pg_temp.offer_at(:'c_w', 'starting') o \gset
reset role;
select ql.run_cancel_intent(:'c_r', 'user', 'user', null, ql.now_ms()) as c_seq \gset
set local role ql_runtime;
select pg_temp.lease2(:'c_w', :'c_s', :'c_o', 1, true) as res \gset
reset role;
select is(:'res'::jsonb ->> 'status', 'stop_requested', 'running under an intent answers stop_requested');
select is(:'res'::jsonb ->> 'stopReason', 'user', 'with the intent''s reason');
select is(pg_temp.attempt(:'c_o'), '(running,3,2,t,2)', 'and the Attempt is running: the process exists until it stops');

-- ---------------------------------------------------------------------------------------------
-- D: the full path — a deadline passed writes the timeout intent, answers stop_requested and flips.
select pg_temp.mk_scenario('{"argv": ["sleep", "1"], "timeoutMs": 1000}') as d_w \gset
set local role ql_runtime;
select o as d_o, o ->> 'sessionId' as d_s, o ->> 'runId' as d_r from pg_temp.offer_at(:'d_w', 'starting') o \gset
reset role;
update ql.run_attempts a set deadline_at_ms = ql.now_ms() - 1 where a.id = (:'d_o'::jsonb ->> 'attemptId')::uuid;
set local role ql_runtime;
select pg_temp.lease2(:'d_w', :'d_s', :'d_o', 1, true) as res \gset
reset role;
select is(:'res'::jsonb ->> 'status', 'stop_requested', 'running past the deadline answers stop_requested');
select is(:'res'::jsonb ->> 'stopReason', 'timeout', 'for the timeout intent it wrote');
select is((select r.cancel_reason from ql.runs r where r.id = :'d_r'), 'timeout', 'the timeout intent is durable');
select is(pg_temp.attempt(:'d_o'), '(running,3,2,t,2)', 'the full path flipped the Attempt with its renewal');
select ok(pg_temp.stream_ok(:'d_r'), 'the Run''s stream stays contiguous');

-- E: the full path's replay of a renewal whose running flag was lost flips then (the process exists).
select pg_temp.mk_scenario() as e_w \gset
set local role ql_runtime;
select o as e_o, o ->> 'sessionId' as e_s from pg_temp.offer_at(:'e_w', 'starting') o \gset
select is(pg_temp.lease2(:'e_w', :'e_s', :'e_o', 1, false) ->> 'leaseVersion', '2', 'E renewed without running');
select pg_temp.lease2(:'e_w', :'e_s', :'e_o', 1, true) as res \gset
reset role;
select is(:'res'::jsonb ->> 'leaseVersion', '2', 'a replay with running answers the stored renewal');
select is(pg_temp.attempt(:'e_o'), '(running,3,2,t,2)', 'and flips the Attempt it finds starting');

-- ---------------------------------------------------------------------------------------------
-- F: an ended Attempt answers terminal and running changes nothing.
select pg_temp.mk_scenario() as f_w \gset
set local role ql_runtime;
select o as f_o, o ->> 'sessionId' as f_s from pg_temp.offer_at(:'f_w', 'starting') o \gset
select is(pg_temp.complete(:'f_w', :'f_s', :'f_o', 1, 0) ->> 'runStatus', 'succeeded', 'F completes from starting');
reset role;
select pg_temp.state() as st \gset
set local role ql_runtime;
select is(pg_temp.lease2(:'f_w', :'f_s', :'f_o', 1, true) ->> 'status', 'terminal', 'running after the end answers terminal');
reset role;
select is(pg_temp.state(), :'st', 'and changes nothing');
select is(pg_temp.attempt(:'f_o'), '(succeeded,3,2,f,1)', 'the ended Attempt was never running');

select * from finish();
rollback;
