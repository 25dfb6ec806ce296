-- Tests ql_api.attempt_lease_control_v1: renewal, existing intent, durable timeout intent, terminal projection and every fence (decision 0000 (ADR-0118 §2, evidence 3)).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(153);

-- The rows a renewal writes, as text: (lease version, attempt version, run version, run event_sequence).
create function pg_temp.versions(p_attempt uuid) returns text language sql
return (select (l.version, a.version, r.version, r.event_sequence)::text
          from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id join ql.runs r on r.id = a.run_id
         where l.attempt_id = p_attempt);

select pg_temp.digest('token-a') as d, pg_temp.digest('token-b') as d_b,
       encode(pg_temp.digest('token-a'), 'hex') as d_hex,
       encode(convert_to('token-a', 'UTF8'), 'hex') as tok_hex,
       (select st.lease_ttl_ms from ql.settings st) as ttl \gset

-- ---------------------------------------------------------------------------------------------
-- Structure: the one wire command, SECURITY DEFINER, EXECUTE for the runtime role only.
select has_function('ql_api', 'attempt_lease_control_v1',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint'],
  'lease control exists with its typed fence parameters');
select is_definer('ql_api', 'attempt_lease_control_v1',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint'],
  'lease control is SECURITY DEFINER');
select function_returns('ql_api', 'attempt_lease_control_v1',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint'], 'jsonb',
  'lease control answers a jsonb result');
select is((select p.proconfig from pg_proc p
            where p.oid = 'ql_api.attempt_lease_control_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'lease control pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'attempt_lease_control_v1',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute lease control');
select function_privs_are('ql_api', 'attempt_lease_control_v1',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute lease control');
set local role ql_runtime;
select throws_ok($$select ql.run_cancel_intent(gen_random_uuid(), 'timeout', 'system', null, 1)$$,
  '42501', 'permission denied for schema ql', 'the runtime role cannot write a cancel intent (or choose its reason) outside the API');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Scenario A: renewal of a claimed, then a running Attempt, old-version rollback, every invalid input and fence.
select pg_temp.mk_scenario('{"argv": ["sleep", "1"], "timeoutMs": 600000}') as a_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'a_w', 'claimed') o \gset a_
reset role;

-- Renewal of a claimed Attempt (live before the start barrier).
select pg_temp.versions(:'a_a') as v_before, ql.now_ms() as t0 \gset
set local role ql_runtime;
select pg_temp.lease(:'a_w', :'a_s', :'a_o', 1) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res'::jsonb ->> 'status', 'renewed', 'a live claimed Attempt is renewed');
select is(pg_temp.versions(:'a_a'), '(2,1,2,1)', 'renewal moves the Lease version from 1 to 2 and leaves the Attempt and the Run alone');
select ok((:'res'::jsonb ->> 'renewedAtMs')::bigint between :t0 and :t1, 'the claimed renewal is stamped with database time');

-- Renewal of a running Attempt: exact projection from database time.
set local role ql_runtime;
select pg_temp.activate('starting', :'a_w', :'a_s', :'a_o') ->> 'status' as ack1,
       pg_temp.activate('running', :'a_w', :'a_s', :'a_o') ->> 'status' as ack2 \gset
reset role;
select pg_temp.versions(:'a_a') as v_before, ql.now_ms() as t0,
       (select count(*) from ql.run_events e where e.run_id = :'a_r') as events_before \gset
set local role ql_runtime;
select pg_temp.lease(:'a_w', :'a_s', :'a_o', 2) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'v_before'::text, '(2,3,3,2)', 'before the running renewal: Lease version 2, Attempt version 3 after two ACKs');
select is(pg_temp.versions(:'a_a'), '(3,3,3,2)', 'a running renewal bumps the Lease version by one and writes no Attempt or Run change');
select is((select count(*) from ql.run_events e where e.run_id = :'a_r'), :'events_before'::bigint,
  'a renewal without intent appends no event');
select ok((:'res'::jsonb ->> 'renewedAtMs')::bigint between :t0 and :t1,
  'renewedAtMs is database time read during the call');
select is((:'res'::jsonb ->> 'expiresAtMs')::bigint, (:'res'::jsonb ->> 'renewedAtMs')::bigint + :ttl,
  'expiresAtMs is renewedAtMs + ql.settings.lease_ttl_ms');
select is(:'res'::jsonb,
  (select jsonb_build_object('status', 'renewed', 'leaseVersion', 3, 'renewedAtMs', l.renewed_at_ms,
                             'expiresAtMs', l.expires_at_ms, 'deadlineAtMs', a.deadline_at_ms,
                             'stopReason', null, 'cancelRequestedAtMs', null)
     from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where l.attempt_id = :'a_a'),
  'renewed answers exactly the stored Lease version/renewed/expiry, the pinned deadline and no stop');
select ok(:'res'::jsonb::text !~ :'d_hex' and :'res'::jsonb::text !~ 'token-a' and :'res'::jsonb::text !~ :'tok_hex',
  'renewed never echoes the token or its digest');

-- Replay of a lost answer: the version just before the current one (2, renewed to 3) under the full
-- fence answers the stored renewal, writes nothing, and reports the REMAINING time (renewedAtMs = now).
select pg_temp.state() as before, ql.now_ms() as t0,
       (select l.expires_at_ms from ql.run_leases l where l.attempt_id = :'a_a') as a_expires \gset
set local role ql_runtime;
select pg_temp.lease(:'a_w', :'a_s', :'a_o', 2) as replay \gset
reset role;
select ql.now_ms() as t1 \gset
select is(pg_temp.state(), :'before', 'a replay writes nothing (no version, row or event changes)');
select is(:'replay'::jsonb - 'renewedAtMs',
  jsonb_build_object('status', 'renewed', 'leaseVersion', 3, 'expiresAtMs', :a_expires,
                     'deadlineAtMs', (:'res'::jsonb -> 'deadlineAtMs'), 'stopReason', null, 'cancelRequestedAtMs', null),
  'a replay answers the stored renewal: the same version 3 and the stored expiry');
select ok((:'replay'::jsonb ->> 'renewedAtMs')::bigint between :t0 and :t1,
  'a replay''s renewedAtMs is database time now, so expiresAtMs - renewedAtMs is the time left');
select ok((:'replay'::jsonb ->> 'expiresAtMs')::bigint - (:'replay'::jsonb ->> 'renewedAtMs')::bigint
          <= (:'res'::jsonb ->> 'expiresAtMs')::bigint - (:'res'::jsonb ->> 'renewedAtMs')::bigint,
  'the TTL a replay grants is never longer than the original renewal''s: the local expiry stays conservative');
set local role ql_runtime;
select is(pg_temp.lease(:'a_w', :'a_s', :'a_o', 2) - 'renewedAtMs', :'replay'::jsonb - 'renewedAtMs',
  'a second replay answers the same');
reset role;
select is(pg_temp.state(), :'before', 'a second replay writes nothing either');
set local role ql_runtime;
select is(pg_temp.lease(:'a_w', :'a_s', :'a_o', 2, 'token-b'), '{"status": "fenced", "reason": "token_mismatch"}',
  'a replay with another token is fenced token_mismatch: the full fence holds for replays');
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 2, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 2),
  '{"status": "fenced", "reason": "stale_generation"}', 'a replay under another Worker generation is fenced');
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 2, :'d', 2),
  '{"status": "fenced", "reason": "stale_lease_generation"}', 'a replay under another lease generation is fenced');

-- Old-version rollback: any older or future expected version is fenced and nothing changes.
select is(pg_temp.lease(:'a_w', :'a_s', :'a_o', 1), '{"status": "fenced", "reason": "stale_version"}',
  'version 1 (two renewals old) is fenced stale_version: only the one lost answer is replayed');
reset role;
select is(pg_temp.state(), :'before', 'old version is fenced and nothing changes');
set local role ql_runtime;
select is(pg_temp.lease(:'a_w', :'a_s', :'a_o', 4), '{"status": "fenced", "reason": "stale_version"}',
  'a version from the future (4) is fenced stale_version');
reset role;
select is(pg_temp.state(), :'before', 'future version is fenced and nothing changes');

-- Invalid input: every checked parameter, NULL and out of range. Each call would otherwise renew.
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', null),
  '{"status": "invalid", "reason": "expected_version"}', 'a NULL expected version is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL expected version is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 0),
  '{"status": "invalid", "reason": "expected_version"}', 'expected version 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'expected version 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', -3),
  '{"status": "invalid", "reason": "expected_version"}', 'a negative expected version is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative expected version is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 9007199254740991),
  '{"status": "invalid", "reason": "expected_version"}', 'an expected version whose successor leaves 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'expected version 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(null, :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "worker_id"}', 'a NULL worker id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL worker id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', null, 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "session_id"}', 'a NULL session id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL session id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', null, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "worker_generation"}', 'a NULL worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL worker generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 0, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "worker_generation"}', 'worker generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', -1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "worker_generation"}', 'a negative worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative worker generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 9007199254740992, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "worker_generation"}', 'a worker generation above 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation above 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, null, :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "project_id"}', 'a NULL project id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL project id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', null, :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "run_id"}', 'a NULL run id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL run id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', null, :'a_oid', 1, :'d', 3),
  '{"status": "invalid", "reason": "attempt_id"}', 'a NULL attempt id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL attempt id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', null, 1, :'d', 3),
  '{"status": "invalid", "reason": "offer_id"}', 'a NULL offer id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL offer id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', null, :'d', 3),
  '{"status": "invalid", "reason": "lease_generation"}', 'a NULL lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL lease generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 0, :'d', 3),
  '{"status": "invalid", "reason": "lease_generation"}', 'lease generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', -1, :'d', 3),
  '{"status": "invalid", "reason": "lease_generation"}', 'a negative lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative lease generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 9007199254740992, :'d', 3),
  '{"status": "invalid", "reason": "lease_generation"}', 'a lease generation above 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation above 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, null, 3),
  '{"status": "invalid", "reason": "token_digest"}', 'a NULL token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL token digest is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, substring(:'d'::bytea from 1 for 31), 3),
  '{"status": "invalid", "reason": "token_digest"}', 'a 31-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', '31-byte token digest is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, (:'d'::bytea || '\x00'::bytea), 3),
  '{"status": "invalid", "reason": "token_digest"}', 'a 33-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', '33-byte token digest is invalid and nothing changes');

-- not_found and identity fences. Scenario B: another Worker with its own live session and Attempt;
-- A2: a second Run of A's Project, never offered.
select pg_temp.mk_scenario() as b_w \gset
select pg_temp.mk_run(r.task_revision_id) as a_r2 from ql.runs r where r.id = :'a_r' \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'b_w', 'running') o \gset b_
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', gen_random_uuid(), 1, :'d', 3),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'an unknown offer beside the Attempt''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'unknown offer is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'b_w', :'b_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "not_found", "reason": "offer"}', 'another Worker''s offer does not exist for this Worker');
reset role;
select is(pg_temp.state(), :'before', 'offer of another Worker is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'b_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'another Project''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Project''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r2', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'another Run of the same Project is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Run''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'b_a', :'a_oid', 1, :'d', 3),
  '{"status": "not_found", "reason": "offer"}', 'another Worker''s Attempt named under this offer is not_found: it does not exist for this one');
reset role;
select is(pg_temp.state(), :'before', 'another Attempt''s id is fenced and nothing changes');

-- Session fences.
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', gen_random_uuid(), 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "fenced", "reason": "stale_session"}', 'an unknown session is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'unknown session is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'b_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "fenced", "reason": "stale_session"}', 'another Worker''s live session is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'another Worker''s session is fenced and nothing changes');
set local role ql_runtime;
select pg_temp.open_session(:'a_w') as a_s_new \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "fenced", "reason": "stale_session"}', 'a session replaced by a newer open is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'replaced session is fenced and nothing changes');
\set a_s :a_s_new
update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1 where id = :'a_s';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "fenced", "reason": "session_expired"}', 'a live session past its expiry is fenced session_expired');
reset role;
select is(pg_temp.state(), :'before', 'expired session is fenced and nothing changes');
update ql.worker_sessions set expires_at_ms = ql.now_ms() + 120000 where id = :'a_s';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 2, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d', 3),
  '{"status": "fenced", "reason": "stale_generation"}', 'a worker generation other than the session''s is fenced stale_generation');
reset role;
select is(pg_temp.state(), :'before', 'wrong worker generation is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 2, :'d', 3),
  '{"status": "fenced", "reason": "stale_lease_generation"}', 'another lease generation is fenced stale_lease_generation');
reset role;
select is(pg_temp.state(), :'before', 'wrong lease generation is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'a_w', :'a_s', 1, :'a_p', :'a_r', :'a_a', :'a_oid', 1, :'d_b', 3),
  '{"status": "fenced", "reason": "token_mismatch"}', 'another token''s digest is fenced token_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'wrong token is fenced and nothing changes');

-- The new live session of the same Worker still holds the Attempt: the fence above was exact.
set local role ql_runtime;
select is(pg_temp.lease(:'a_w', :'a_s', :'a_o', 3) ->> 'leaseVersion', '4',
  'after the fences, the Worker''s new live session renews version 3 to 4');
reset role;

-- Expired Lease: age the Attempt past its Lease expiry.
select pg_temp.age_attempt(:'a_o', 120000);
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.lease(:'a_w', :'a_s', :'a_o', 4), '{"status": "fenced", "reason": "lease_expired"}',
  'a Lease past its expiry is fenced lease_expired, never renewed');
reset role;
select is(pg_temp.state(), :'before', 'expired Lease is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- Re-enrolled Worker: the session's generation matches the call, the Attempt's does not.
select pg_temp.mk_scenario() as c_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'c_w', 'running') o \gset c_
reset role;
update ql.workers set generation = 2 where id = :'c_w';
set local role ql_runtime;
select ql_api.worker_session_open_v1(:'c_w', 2, pg_temp.digest('cert-a'), 4) ->> 'sessionId' as c_s2 \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_lease_control_v1(:'c_w', :'c_s2', 2, :'c_p', :'c_r', :'c_a', :'c_oid', 1, :'d', 1),
  '{"status": "fenced", "reason": "stale_generation"}', 'an Attempt of the previous worker generation is fenced stale_generation');
reset role;
select is(pg_temp.state(), :'before', 'previous-generation Attempt is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- State drift: lost and abandoned Attempts are no longer this Worker's.
select pg_temp.mk_scenario() as e_w \gset
set local role ql_runtime;
select o, o ->> 'attemptId' as a, o ->> 'sessionId' as s from pg_temp.offer_at(:'e_w', 'running') o \gset e_
reset role;
update ql.run_attempts set status = 'lost', ended_at_ms = ql.now_ms() where id = :'e_a';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.lease(:'e_w', :'e_s', :'e_o', 1), '{"status": "fenced", "reason": "state_drift"}',
  'a lost Attempt is fenced state_drift, not renewed');
reset role;
select is(pg_temp.state(), :'before', 'lost Attempt is fenced and nothing changes');
select pg_temp.mk_scenario() as f_w \gset
set local role ql_runtime;
select o, o ->> 'attemptId' as a, o ->> 'sessionId' as s from pg_temp.offer_at(:'f_w', 'claimed') o \gset f_
reset role;
update ql.run_attempts set status = 'abandoned', ended_at_ms = ql.now_ms() where id = :'f_a';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.lease(:'f_w', :'f_s', :'f_o', 1), '{"status": "fenced", "reason": "state_drift"}',
  'an abandoned claim is fenced state_drift, not renewed');
reset role;
select is(pg_temp.state(), :'before', 'abandoned Attempt is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- Existing intent: a user cancel intent (and a deadline that also passed) → still renews, then
-- stop_requested with reason user; no second intent, no event.
select pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 5000}') as g_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'runId' as r, o ->> 'attemptId' as a
  from pg_temp.offer_at(:'g_w', 'running') o \gset g_
reset role;
select ql.run_cancel_intent(:'g_r', 'user', 'user', null, ql.now_ms()) as g_seq \gset
select pg_temp.age_attempt(:'g_o', 10000);
select (r.version, r.event_sequence, r.cancel_reason, r.cancel_requested_at_ms)::text as g_run,
       r.cancel_requested_at_ms as g_cancel_at, pg_temp.versions(:'g_a') as v_before, ql.now_ms() as t0
  from ql.runs r where r.id = :'g_r' \gset
set local role ql_runtime;
select pg_temp.lease(:'g_w', :'g_s', :'g_o', 1) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'v_before'::text, '(1,3,4,3)', 'before: Lease version 1, Attempt version 3, Run version 4 after the user intent');
select is(pg_temp.versions(:'g_a'), '(2,3,4,3)', 'an existing intent still renews: Lease version +1, the Attempt and the Run untouched');
select is(:'res'::jsonb,
  (select jsonb_build_object('status', 'stop_requested', 'leaseVersion', 2, 'renewedAtMs', l.renewed_at_ms,
                             'expiresAtMs', l.expires_at_ms, 'deadlineAtMs', a.deadline_at_ms,
                             'stopReason', 'user', 'cancelRequestedAtMs', :g_cancel_at)
     from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where l.attempt_id = :'g_a'),
  'an existing user intent answers stop_requested with stopReason user and its durable time');
select ok((:'res'::jsonb ->> 'renewedAtMs')::bigint between :t0 and :t1
          and (:'res'::jsonb ->> 'expiresAtMs')::bigint = (:'res'::jsonb ->> 'renewedAtMs')::bigint + :ttl,
  'the stop_requested renewal is stamped from database time with the lease TTL');
select is((select (r.version, r.event_sequence, r.cancel_reason, r.cancel_requested_at_ms)::text from ql.runs r where r.id = :'g_r'),
  :'g_run', 'the existing intent is not rewritten (a passed deadline does not turn it into timeout)');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text from ql.run_events e
                            where e.run_id = %L and e.type = 'run.cancel_requested' order by e.sequence$$, :'g_r'),
  format($$values (%s::bigint, 'run.cancel_requested'::text, 'user'::text)$$, :g_seq),
  'exactly one run.cancel_requested event, the user''s: no second intent or event');
select ok(:'res'::jsonb::text !~ :'d_hex' and :'res'::jsonb::text !~ 'token-a' and :'res'::jsonb::text !~ :'tok_hex',
  'stop_requested never echoes the token or its digest');

-- ---------------------------------------------------------------------------------------------
-- Deadline timeout intent: the pinned deadline passed, the Lease is alive, no intent yet.
select pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 5000}') as h_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'runId' as r, o ->> 'attemptId' as a
  from pg_temp.offer_at(:'h_w', 'running') o \gset h_
reset role;
select pg_temp.age_attempt(:'h_o', 10000);   -- deadline 5 s ago; the offer Lease (30 s) still has ~20 s
select r.version as h_version, r.event_sequence as h_seq, ql.now_ms() as t0,
       (select a.deadline_at_ms < ql.now_ms() and l.expires_at_ms > ql.now_ms()
          from ql.run_attempts a join ql.run_leases l on l.attempt_id = a.id where a.id = :'h_a') as h_setup
  from ql.runs r where r.id = :'h_r' \gset
set local role ql_runtime;
select pg_temp.lease(:'h_w', :'h_s', :'h_o', 1) as res \gset
reset role;
select ql.now_ms() as t1 \gset
select ok(:'h_setup', 'setup: the deadline passed while the Lease is still alive');
select is(:'res'::jsonb ->> 'status', 'stop_requested', 'a passed deadline answers stop_requested');
select is(:'res'::jsonb ->> 'stopReason', 'timeout', 'the stop reason is timeout');
select is(pg_temp.versions(:'h_a'), format('(2,3,%s,%s)', :h_version + 1, :h_seq + 1),
  'the renewal still bumps the Lease, and the intent bumps Run version and event sequence by one');
select results_eq(format($$select r.cancel_reason::text, r.cancel_requested_at_ms::bigint, r.status::text
                            from ql.runs r where r.id = %L$$, :'h_r'),
  format($$values ('timeout'::text, %s::bigint, 'running'::text)$$, (:'res'::jsonb ->> 'cancelRequestedAtMs')::bigint),
  'runs.cancel_reason = timeout and cancel_requested_at_ms is the answered time; the Run keeps running');
select ok((:'res'::jsonb ->> 'cancelRequestedAtMs')::bigint between :t0 and :t1
          and :'res'::jsonb ->> 'cancelRequestedAtMs' = :'res'::jsonb ->> 'renewedAtMs',
  'the timeout intent is stamped with the same database time as the renewal');
select results_eq(format($$select e.sequence, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.occurred_at_ms::bigint
                            from ql.run_events e where e.run_id = %L and e.type = 'run.cancel_requested'
                            order by e.sequence$$, :'h_r'),
  format($$values (%s::bigint, 'system'::text, null::uuid, null::uuid,
                   jsonb_build_object('reason', 'timeout', 'cancelRequestedAtMs', %s::bigint), %s::bigint)$$,
         :h_seq + 1, (:'res'::jsonb ->> 'cancelRequestedAtMs')::bigint, (:'res'::jsonb ->> 'cancelRequestedAtMs')::bigint),
  'exactly one run.cancel_requested event, by the system, at the next sequence, with reason and time');
select is(:'res'::jsonb,
  (select jsonb_build_object('status', 'stop_requested', 'leaseVersion', 2, 'renewedAtMs', l.renewed_at_ms,
                             'expiresAtMs', l.expires_at_ms, 'deadlineAtMs', a.deadline_at_ms,
                             'stopReason', 'timeout', 'cancelRequestedAtMs', r.cancel_requested_at_ms)
     from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id join ql.runs r on r.id = a.run_id
    where l.attempt_id = :'h_a'),
  'the timeout stop_requested answers exactly the stored Lease, deadline and intent');
select (r.version, r.event_sequence, r.cancel_reason, r.cancel_requested_at_ms)::text as h_run from ql.runs r where r.id = :'h_r' \gset
set local role ql_runtime;
select pg_temp.lease(:'h_w', :'h_s', :'h_o', 2) as res2 \gset
reset role;
select is(:'res2'::jsonb - 'renewedAtMs' - 'expiresAtMs',
  jsonb_build_object('status', 'stop_requested', 'leaseVersion', 3, 'deadlineAtMs', :'res'::jsonb -> 'deadlineAtMs',
                     'stopReason', 'timeout', 'cancelRequestedAtMs', :'res'::jsonb -> 'cancelRequestedAtMs'),
  'a second renewal answers stop_requested timeout with the same durable intent and version 3');
select is((select (r.version, r.event_sequence, r.cancel_reason, r.cancel_requested_at_ms)::text from ql.runs r where r.id = :'h_r'),
  :'h_run', 'the second renewal writes no second intent: Run version and event sequence unchanged');
select is((select count(*) from ql.run_events e where e.run_id = :'h_r' and e.type = 'run.cancel_requested'), 1::bigint,
  'still exactly one run.cancel_requested event');

-- ---------------------------------------------------------------------------------------------
-- Terminal projection after completion (timed_out, cancelled, succeeded, failed): exact, and read-only.
set local role ql_runtime;
select is(pg_temp.complete(:'h_w', :'h_s', :'h_o', 3, 143) ->> 'status', 'completed',
  'setup: the timed-out Attempt completes with exit 143');
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select pg_temp.lease(:'h_w', :'h_s', :'h_o', 3) as res \gset
reset role;
select is(:'res'::jsonb,
  (select jsonb_build_object('status', 'terminal', 'runStatus', 'timed_out', 'attemptStatus', 'timed_out',
                             'exitCode', 143, 'errorCode', null, 'endedAtMs', a.ended_at_ms)
     from ql.run_attempts a where a.id = :'h_a'),
  'a timed-out Attempt answers the exact terminal projection');
select is(pg_temp.state(), :'before', 'terminal projection changes nothing');
select ok(:'res'::jsonb::text !~ :'d_hex' and :'res'::jsonb::text !~ 'token-a' and :'res'::jsonb::text !~ :'tok_hex',
  'terminal never echoes the token or its digest');
set local role ql_runtime;
select is(pg_temp.lease(:'h_w', :'h_s', :'h_o', 1), :'res'::jsonb,
  'an old version still gets the same terminal projection');
select is(pg_temp.lease(:'h_w', :'h_s', :'h_o', 3, 'token-b'), '{"status": "fenced", "reason": "token_mismatch"}',
  'the terminal projection is behind the full fence: a wrong token is fenced');
reset role;
select is(pg_temp.state(), :'before', 'terminal replays and a fenced terminal call change nothing');

set local role ql_runtime;
select is(pg_temp.complete(:'g_w', :'g_s', :'g_o', 2, null, 'killed') ->> 'status', 'completed',
  'setup: the cancelled Attempt completes without an exit code (killed)');
select pg_temp.lease(:'g_w', :'g_s', :'g_o', 2) as res \gset
reset role;
select is(:'res'::jsonb,
  (select jsonb_build_object('status', 'terminal', 'runStatus', 'cancelled', 'attemptStatus', 'cancelled',
                             'exitCode', null, 'errorCode', 'killed', 'endedAtMs', a.ended_at_ms)
     from ql.run_attempts a where a.id = :'g_a'),
  'a cancelled Attempt answers the exact terminal projection with its error code');

select pg_temp.mk_scenario() as i_w \gset
select pg_temp.mk_scenario() as j_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'attemptId' as a from pg_temp.offer_at(:'i_w', 'running') o \gset i_
select o, o ->> 'sessionId' as s, o ->> 'attemptId' as a from pg_temp.offer_at(:'j_w', 'running') o \gset j_
select is(pg_temp.complete(:'i_w', :'i_s', :'i_o', 1, 0) ->> 'status', 'completed', 'setup: exit 0 completes');
select is(pg_temp.complete(:'j_w', :'j_s', :'j_o', 1, 3) ->> 'status', 'completed', 'setup: exit 3 completes');
select pg_temp.lease(:'i_w', :'i_s', :'i_o', 1) as res_i, pg_temp.lease(:'j_w', :'j_s', :'j_o', 1) as res_j \gset
reset role;
select is(:'res_i'::jsonb,
  (select jsonb_build_object('status', 'terminal', 'runStatus', 'succeeded', 'attemptStatus', 'succeeded',
                             'exitCode', 0, 'errorCode', null, 'endedAtMs', a.ended_at_ms)
     from ql.run_attempts a where a.id = :'i_a'),
  'a succeeded Attempt answers the exact terminal projection');
select is(:'res_j'::jsonb,
  (select jsonb_build_object('status', 'terminal', 'runStatus', 'failed', 'attemptStatus', 'failed',
                             'exitCode', 3, 'errorCode', null, 'endedAtMs', a.ended_at_ms)
     from ql.run_attempts a where a.id = :'j_a'),
  'a failed Attempt answers the exact terminal projection');

-- ---------------------------------------------------------------------------------------------
-- Scenario R (the lost-answer case): renew 1→2 commits, its answer is lost, then the task exits 0.
select pg_temp.mk_scenario('{"argv": ["true"]}') as r_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'runId' as r, o ->> 'attemptId' as a
  from pg_temp.offer_at(:'r_w', 'running') o \gset r_
select pg_temp.lease(:'r_w', :'r_s', :'r_o', 1) ->> 'leaseVersion' as r_lost \gset
select is(pg_temp.complete(:'r_w', :'r_s', :'r_o', 1, 0), '{"status": "fenced", "reason": "stale_version"}',
  'R: completion with the version whose renewal answer was lost stays fenced (the Worker replays lease control first)');
select is(pg_temp.lease(:'r_w', :'r_s', :'r_o', 1) ->> 'leaseVersion', :'r_lost',
  'R: the lease-control replay hands the Worker the version that committed');
select is(pg_temp.complete(:'r_w', :'r_s', :'r_o', 2, 0) ->> 'runStatus', 'succeeded',
  'R: completion with that version succeeds');
reset role;
select is((select count(*) from ql.run_attempts a where a.run_id = :'r_r'), 1::bigint,
  'R: one Attempt: a lost answer did not make the Run run again');
select ok(pg_temp.stream_ok(:'r_r'), 'R: the event stream stays contiguous');

-- Scenario Q: a replay under a cancel intent answers stop_requested; a replay after expiry is fenced.
select pg_temp.mk_scenario('{"argv": ["sleep", "60"]}') as q_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'runId' as r, o ->> 'attemptId' as a
  from pg_temp.offer_at(:'q_w', 'running') o \gset q_
select pg_temp.lease(:'q_w', :'q_s', :'q_o', 1) as q_first \gset
reset role;
select ql.run_cancel_intent(:'q_r', 'user', 'user', null, ql.now_ms()) as q_seq \gset
select pg_temp.state() as before,
       (select r.cancel_requested_at_ms from ql.runs r where r.id = :'q_r') as q_cancel_at \gset
set local role ql_runtime;
select pg_temp.lease(:'q_w', :'q_s', :'q_o', 1) as q_replay \gset
reset role;
select is(:'q_replay'::jsonb - 'renewedAtMs',
  jsonb_build_object('status', 'stop_requested', 'leaseVersion', 2, 'expiresAtMs', (:'q_first'::jsonb -> 'expiresAtMs'),
                     'deadlineAtMs', null, 'stopReason', 'user', 'cancelRequestedAtMs', :q_cancel_at),
  'Q: a replay under an existing intent answers stop_requested with the stored version and expiry');
select is(pg_temp.state(), :'before', 'Q: the stop_requested replay writes nothing');
select pg_temp.age_attempt(:'q_o', 100000);
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.lease(:'q_w', :'q_s', :'q_o', 1), '{"status": "fenced", "reason": "lease_expired"}',
  'Q: a replay after the Lease expired is fenced lease_expired');
reset role;
select is(pg_temp.state(), :'before', 'Q: the fenced replay changes nothing');

-- Scenario P: the deadline passes between a renewal whose answer was lost and its replay. The replay writes
-- the timeout intent the renewal would have written (decision 0016) and answers stop_requested, renewing nothing.
select pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 600000}') as p_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'runId' as r, o ->> 'attemptId' as a
  from pg_temp.offer_at(:'p_w', 'running') o \gset p_
select pg_temp.lease(:'p_w', :'p_s', :'p_o', 1) as p_first \gset
reset role;
update ql.run_attempts set deadline_at_ms = ql.now_ms() - 1 where id = :'p_a';
select r.event_sequence as p_seq from ql.runs r where r.id = :'p_r' \gset
set local role ql_runtime;
select pg_temp.lease(:'p_w', :'p_s', :'p_o', 1) as p_replay \gset
reset role;
select results_eq(format($$select r.cancel_reason::text, r.cancel_requested_at_ms is not null, l.version, l.expires_at_ms::bigint
                             from ql.runs r, ql.run_leases l where r.id = %L and l.attempt_id = %L$$, :'p_r', :'p_a'),
  format($$values ('timeout'::text, true, 2::bigint, %s::bigint)$$, :'p_first'::jsonb ->> 'expiresAtMs'),
  'P: the replay past the deadline writes the timeout intent and renews nothing (version 2, the same expiry)');
select is((:'p_replay'::jsonb ->> 'status') || '/' || (:'p_replay'::jsonb ->> 'stopReason') || '/'
          || (:'p_replay'::jsonb ->> 'leaseVersion'), 'stop_requested/timeout/2',
  'P: it answers stop_requested, reason timeout, at the stored version');
select is((select jsonb_agg(e.type order by e.sequence) from ql.run_events e where e.run_id = :'p_r' and e.sequence > :p_seq),
  '["run.cancel_requested"]'::jsonb, 'P: one event, the intent');

-- ---------------------------------------------------------------------------------------------
-- No raw token anywhere in the database (decision 0000 (ADR-0118 evidence 3)): only its SHA-256 is stored.
select ok(pg_temp.state() !~ 'token-a', 'the raw token text is nowhere in the stored rows');
select ok(pg_temp.state() !~ :'tok_hex', 'the raw token''s bytes (hex) are nowhere in the stored rows');
select ok(pg_temp.state() !~ encode(convert_to('token-b', 'UTF8'), 'hex') and pg_temp.state() !~ 'token-b',
  'a rejected token leaves no trace either');
select ok(not exists (select 1 from ql.run_events e where e.payload::text ~ :'d_hex'),
  'no event payload carries the token digest');
select is((select count(*) from ql.run_leases l where l.token_digest = :'d'::bytea),
          (select count(*) from ql.run_leases l), 'every Lease stores exactly the SHA-256 of its token');

select * from finish();
rollback;
