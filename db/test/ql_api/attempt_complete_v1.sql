-- Tests ql_api.attempt_complete_v1: outcomes (succeeded, failed, retry, cancelled, timed_out), receipts, exact replay and every fence.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(206);

select pg_temp.digest('token-a') as d, pg_temp.digest('token-b') as d_b,
       encode(pg_temp.digest('token-a'), 'hex') as d_hex,
       encode(convert_to('token-a', 'UTF8'), 'hex') as tok_hex \gset

-- ---------------------------------------------------------------------------------------------
-- Structure: the one wire command, SECURITY DEFINER, EXECUTE for the runtime role only.
select has_function('ql_api', 'attempt_complete_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'integer', 'text', 'jsonb'], 'completion exists with its typed parameters');
select is_definer('ql_api', 'attempt_complete_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'integer', 'text', 'jsonb'], 'completion is SECURITY DEFINER');
select function_returns('ql_api', 'attempt_complete_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'integer', 'text', 'jsonb'], 'jsonb', 'completion answers a jsonb result');
select is((select p.proconfig from pg_proc p
            where p.oid = 'ql_api.attempt_complete_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, integer, text, jsonb)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'completion pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'attempt_complete_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'integer', 'text', 'jsonb'], 'ql_runtime', array['EXECUTE'], 'the runtime role may execute completion');
select function_privs_are('ql_api', 'attempt_complete_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'bigint', 'integer', 'text', 'jsonb'], 'public', array[]::text[], 'PUBLIC may not execute completion');
set local role ql_runtime;
select throws_ok($$select count(*) from ql.run_attempts$$, '42501', 'permission denied for schema ql',
  'the runtime role cannot end an Attempt outside the API');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Scenario S: exit 0 with both receipts after one renewal → succeeded. X: another Attempt with the same log.
select pg_temp.mk_scenario() as s_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'s_w', 'running') o \gset s_
reset role;
select pg_temp.mk_scenario() as x_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'x_w', 'running') o \gset x_
reset role;
set local role ql_runtime;
select pg_temp.upload(:'s_w', :'s_s', :'s_o', 'log', 'hello'::bytea) as s_log,
       pg_temp.upload(:'s_w', :'s_s', :'s_o', 'result', '42'::bytea) as s_result,
       pg_temp.upload(:'x_w', :'x_s', :'x_o', 'log', 'hello'::bytea) as x_log,
       pg_temp.lease(:'s_w', :'s_s', :'s_o', 1) ->> 'leaseVersion' as s_version \gset
reset role;
select is(:'s_version'::text, '2', 'setup: scenario S renewed its Lease to version 2');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 1, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "stale_version"}', 'completion with the version before the last renewal is fenced stale_version');
reset role;
select is(pg_temp.state(), :'before', 'old version is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 3, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "stale_version"}', 'completion with a version never granted is fenced stale_version');
reset role;
select is(pg_temp.state(), :'before', 'future version is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "artifact_mismatch"}', 'a completion missing the result receipt is fenced artifact_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'missing receipt is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, '[]'),
  '{"status": "fenced", "reason": "artifact_mismatch"}', 'a completion with no receipts while artifacts are stored is fenced artifact_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'no receipts is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind') || jsonb_build_object('sha256', encode(sha256('42'::bytea), 'hex')), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "artifact_mismatch"}', 'a receipt with another SHA-256 is fenced artifact_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'wrong SHA-256 is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind') || '{"size": 6}', ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "artifact_mismatch"}', 'a receipt with another size is fenced artifact_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'wrong size is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind') || jsonb_build_object('artifactId', gen_random_uuid()), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "artifact_mismatch"}', 'a receipt naming an unknown artifact is fenced artifact_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'unknown artifact is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, jsonb_build_array(((:'x_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "artifact_mismatch"}', 'the receipt of another Attempt''s identical log is fenced artifact_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Attempt''s receipt is fenced and nothing changes');
select r.event_sequence as s_seq, a.version as s_av, a.callback_sequence as s_cb, ql.now_ms() as t0
  from ql.runs r join ql.run_attempts a on a.id = :'s_a' where r.id = :'s_r' \gset
set local role ql_runtime;
select pg_temp.complete(:'s_w', :'s_s', :'s_o', 2, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))) as s_res \gset
reset role;
select ql.now_ms() as t1, a.ended_at_ms as s_end from ql.run_attempts a where a.id = :'s_a' \gset
select is(:'s_res'::jsonb - 'snapshot', '{"status": "completed", "runStatus": "succeeded", "attemptStatus": "succeeded"}'::jsonb,
  'exit 0: completed with run succeeded, attempt succeeded');
select is(:'s_res'::jsonb -> 'snapshot',
  (select ql.attempt_snapshot(r, a, l) from ql.runs r join ql.run_attempts a on a.run_id = r.id
     join ql.run_leases l on l.attempt_id = a.id where a.id = :'s_a'),
  'exit 0: the answer carries the exact snapshot of the ended Attempt');
select results_eq(format($$select a.status::text, a.exit_code, a.error_code, a.version, a.callback_sequence,
                                  a.completion_digest is not null from ql.run_attempts a where a.id = %L$$, :'s_a'),
  format($$values (%L::text, %s::integer, %s::text, %s::bigint, %s::integer, true)$$,
         'succeeded', '0', $$null$$, :s_av + 1, :s_cb + 1),
  'exit 0: the Attempt ends succeeded with its exit and error, version and callback sequence +1, and the completion digest');
select ok(:s_end between :t0 and :t1, 'exit 0: the Attempt ends at database time');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.occurred_at_ms::bigint
                            from ql.run_events e where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'s_r', :s_seq),
  format($$values (%s::bigint, 'attempt.succeeded'::text, 'worker'::text, %L::uuid, %L::uuid, '{"attemptNo": 1, "exitCode": 0}'::jsonb, %s::bigint),
                  (%s::bigint, 'run.succeeded'::text, 'worker'::text, %L::uuid, %L::uuid, '{"status": "succeeded"}'::jsonb, %s::bigint)$$,
         :s_seq + 1, :'s_w', :'s_a', :s_end, :s_seq + 2, :'s_w', :'s_a', :s_end),
  'exit 0: events attempt.succeeded then run.succeeded, by the Worker, at the next two sequences');
select ok(pg_temp.stream_ok(:'s_r'), 'exit 0: the event stream is contiguous and runs.version = 1 + event count');
select ok(:'s_res'::jsonb::text !~ :'d_hex' and :'s_res'::jsonb::text !~ 'token-a' and :'s_res'::jsonb::text !~ :'tok_hex',
  'exit 0: the answer never carries the token or its digest');
select is(:'s_res'::jsonb -> 'snapshot' -> 'artifacts',
  jsonb_build_array(:'s_log'::jsonb -> 'receipt', :'s_result'::jsonb -> 'receipt'),
  'exit 0: the completed snapshot lists exactly the stored artifacts, as their upload receipts');
select results_eq(format($$select r.status::text, r.ended_at_ms::bigint, r.current_attempt_id, r.retry_at_ms::bigint
                            from ql.runs r where r.id = %L$$, :'s_r'),
  format($$values ('succeeded'::text, %s::bigint, null::uuid, null::bigint)$$, :s_end),
  'exit 0: the Run ends succeeded when the Attempt ends and releases its current Attempt');

-- Replays: the exact completion (receipts in any order) answers already_completed; any other is fenced.
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  (:'s_res'::jsonb || '{"status": "already_completed"}'), 'an exact replay answers already_completed with the same statuses and snapshot');
reset role;
select is(pg_temp.state(), :'before', 'exact replay is answered and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, jsonb_build_array(((:'s_result'::jsonb -> 'receipt') - 'kind'), ((:'s_log'::jsonb -> 'receipt') - 'kind'))),
  (:'s_res'::jsonb || '{"status": "already_completed"}'), 'a replay with the receipts in another order is the same completion');
reset role;
select is(pg_temp.state(), :'before', 'reordered replay is answered and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 3, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "completion_conflict"}', 'another exit code for the ended Attempt is fenced completion_conflict');
reset role;
select is(pg_temp.state(), :'before', 'a different exit is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 1, 0, null, jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "completion_conflict"}', 'another lease version for the ended Attempt is fenced completion_conflict');
reset role;
select is(pg_temp.state(), :'before', 'a different version is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, 0, null, '[]'),
  '{"status": "fenced", "reason": "completion_conflict"}', 'other receipts for the ended Attempt are fenced completion_conflict');
reset role;
select is(pg_temp.state(), :'before', 'different receipts are fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'s_w', :'s_s', 1, :'s_p', :'s_r', :'s_a', :'s_oid', 1, :'d', 2, null, 'killed', jsonb_build_array(((:'s_log'::jsonb -> 'receipt') - 'kind'), ((:'s_result'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "completion_conflict"}', 'an error code for the ended Attempt is fenced completion_conflict');
reset role;
select is(pg_temp.state(), :'before', 'a different error is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- Receipts name exactly the stored artifacts: the log's receipt twice is not the log and the result.
select pg_temp.mk_scenario() as u_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'u_w', 'running') o \gset u_
reset role;
set local role ql_runtime;
select pg_temp.upload(:'u_w', :'u_s', :'u_o', 'log', 'hello'::bytea) as u_log,
       pg_temp.upload(:'u_w', :'u_s', :'u_o', 'result', '42'::bytea) as u_result \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.complete(:'u_w', :'u_s', :'u_o', 1, 0, null, jsonb_build_array(((:'u_log'::jsonb -> 'receipt') - 'kind'), ((:'u_log'::jsonb -> 'receipt') - 'kind'))),
  '{"status": "fenced", "reason": "artifact_mismatch"}', 'the log receipt twice (the result unnamed) is fenced artifact_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'duplicate receipt is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- Exit 3 without retry → failed; no exit code with an error code → failed with that error.
select pg_temp.mk_scenario() as f_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'f_w', 'running') o \gset f_
reset role;
select r.event_sequence as f_seq, a.version as f_av, a.callback_sequence as f_cb, ql.now_ms() as t0
  from ql.runs r join ql.run_attempts a on a.id = :'f_a' where r.id = :'f_r' \gset
set local role ql_runtime;
select pg_temp.complete(:'f_w', :'f_s', :'f_o', 1, 3, null, '[]') as f_res \gset
reset role;
select ql.now_ms() as t1, a.ended_at_ms as f_end from ql.run_attempts a where a.id = :'f_a' \gset
select is(:'f_res'::jsonb - 'snapshot', '{"status": "completed", "runStatus": "failed", "attemptStatus": "failed"}'::jsonb,
  'exit 3: completed with run failed, attempt failed');
select is(:'f_res'::jsonb -> 'snapshot',
  (select ql.attempt_snapshot(r, a, l) from ql.runs r join ql.run_attempts a on a.run_id = r.id
     join ql.run_leases l on l.attempt_id = a.id where a.id = :'f_a'),
  'exit 3: the answer carries the exact snapshot of the ended Attempt');
select results_eq(format($$select a.status::text, a.exit_code, a.error_code, a.version, a.callback_sequence,
                                  a.completion_digest is not null from ql.run_attempts a where a.id = %L$$, :'f_a'),
  format($$values (%L::text, %s::integer, %s::text, %s::bigint, %s::integer, true)$$,
         'failed', '3', $$null$$, :f_av + 1, :f_cb + 1),
  'exit 3: the Attempt ends failed with its exit and error, version and callback sequence +1, and the completion digest');
select ok(:f_end between :t0 and :t1, 'exit 3: the Attempt ends at database time');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.occurred_at_ms::bigint
                            from ql.run_events e where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'f_r', :f_seq),
  format($$values (%s::bigint, 'attempt.failed'::text, 'worker'::text, %L::uuid, %L::uuid, '{"attemptNo": 1, "exitCode": 3}'::jsonb, %s::bigint),
                  (%s::bigint, 'run.failed'::text, 'worker'::text, %L::uuid, %L::uuid, '{"status": "failed"}'::jsonb, %s::bigint)$$,
         :f_seq + 1, :'f_w', :'f_a', :f_end, :f_seq + 2, :'f_w', :'f_a', :f_end),
  'exit 3: events attempt.failed then run.failed, by the Worker, at the next two sequences');
select ok(pg_temp.stream_ok(:'f_r'), 'exit 3: the event stream is contiguous and runs.version = 1 + event count');
select ok(:'f_res'::jsonb::text !~ :'d_hex' and :'f_res'::jsonb::text !~ 'token-a' and :'f_res'::jsonb::text !~ :'tok_hex',
  'exit 3: the answer never carries the token or its digest');
select results_eq(format($$select r.status::text, r.ended_at_ms::bigint, r.current_attempt_id, r.retry_at_ms::bigint
                            from ql.runs r where r.id = %L$$, :'f_r'),
  format($$values ('failed'::text, %s::bigint, null::uuid, null::bigint)$$, :f_end),
  'exit 3: with maxAttempts spent the Run ends failed at the Attempt''s end');
select pg_temp.mk_scenario() as k_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'k_w', 'running') o \gset k_
reset role;
select r.event_sequence as k_seq, a.version as k_av, a.callback_sequence as k_cb, ql.now_ms() as t0
  from ql.runs r join ql.run_attempts a on a.id = :'k_a' where r.id = :'k_r' \gset
set local role ql_runtime;
select pg_temp.complete(:'k_w', :'k_s', :'k_o', 1, null, 'killed', '[]') as k_res \gset
reset role;
select ql.now_ms() as t1, a.ended_at_ms as k_end from ql.run_attempts a where a.id = :'k_a' \gset
select is(:'k_res'::jsonb - 'snapshot', '{"status": "completed", "runStatus": "failed", "attemptStatus": "failed"}'::jsonb,
  'no exit code: completed with run failed, attempt failed');
select is(:'k_res'::jsonb -> 'snapshot',
  (select ql.attempt_snapshot(r, a, l) from ql.runs r join ql.run_attempts a on a.run_id = r.id
     join ql.run_leases l on l.attempt_id = a.id where a.id = :'k_a'),
  'no exit code: the answer carries the exact snapshot of the ended Attempt');
select results_eq(format($$select a.status::text, a.exit_code, a.error_code, a.version, a.callback_sequence,
                                  a.completion_digest is not null from ql.run_attempts a where a.id = %L$$, :'k_a'),
  format($$values (%L::text, %s::integer, %s::text, %s::bigint, %s::integer, true)$$,
         'failed', 'null', $$'killed'$$, :k_av + 1, :k_cb + 1),
  'no exit code: the Attempt ends failed with its exit and error, version and callback sequence +1, and the completion digest');
select ok(:k_end between :t0 and :t1, 'no exit code: the Attempt ends at database time');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.occurred_at_ms::bigint
                            from ql.run_events e where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'k_r', :k_seq),
  format($$values (%s::bigint, 'attempt.failed'::text, 'worker'::text, %L::uuid, %L::uuid, '{"attemptNo": 1, "errorCode": "killed"}'::jsonb, %s::bigint),
                  (%s::bigint, 'run.failed'::text, 'worker'::text, %L::uuid, %L::uuid, '{"status": "failed"}'::jsonb, %s::bigint)$$,
         :k_seq + 1, :'k_w', :'k_a', :k_end, :k_seq + 2, :'k_w', :'k_a', :k_end),
  'no exit code: events attempt.failed then run.failed, by the Worker, at the next two sequences');
select ok(pg_temp.stream_ok(:'k_r'), 'no exit code: the event stream is contiguous and runs.version = 1 + event count');
select ok(:'k_res'::jsonb::text !~ :'d_hex' and :'k_res'::jsonb::text !~ 'token-a' and :'k_res'::jsonb::text !~ :'tok_hex',
  'no exit code: the answer never carries the token or its digest');

-- ---------------------------------------------------------------------------------------------
-- Retry: maxAttempts 2, retryBackoffMs 1000 and a failing exit → retry_wait at ended + 1000.
select pg_temp.mk_scenario('{"argv": ["false"], "maxAttempts": 2, "retryBackoffMs": 1000}') as y_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'y_w', 'running') o \gset y_
reset role;
select r.event_sequence as y_seq, a.version as y_av, a.callback_sequence as y_cb, ql.now_ms() as t0
  from ql.runs r join ql.run_attempts a on a.id = :'y_a' where r.id = :'y_r' \gset
set local role ql_runtime;
select pg_temp.complete(:'y_w', :'y_s', :'y_o', 1, 3, null, '[]') as y_res \gset
reset role;
select ql.now_ms() as t1, a.ended_at_ms as y_end from ql.run_attempts a where a.id = :'y_a' \gset
select is(:'y_res'::jsonb - 'snapshot', '{"status": "completed", "runStatus": "retry_wait", "attemptStatus": "failed"}'::jsonb,
  'retry: completed with run retry_wait, attempt failed');
select is(:'y_res'::jsonb -> 'snapshot',
  (select ql.attempt_snapshot(r, a, l) from ql.runs r join ql.run_attempts a on a.run_id = r.id
     join ql.run_leases l on l.attempt_id = a.id where a.id = :'y_a'),
  'retry: the answer carries the exact snapshot of the ended Attempt');
select results_eq(format($$select a.status::text, a.exit_code, a.error_code, a.version, a.callback_sequence,
                                  a.completion_digest is not null from ql.run_attempts a where a.id = %L$$, :'y_a'),
  format($$values (%L::text, %s::integer, %s::text, %s::bigint, %s::integer, true)$$,
         'failed', '3', $$null$$, :y_av + 1, :y_cb + 1),
  'retry: the Attempt ends failed with its exit and error, version and callback sequence +1, and the completion digest');
select ok(:y_end between :t0 and :t1, 'retry: the Attempt ends at database time');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.occurred_at_ms::bigint
                            from ql.run_events e where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'y_r', :y_seq),
  format($$values (%s::bigint, 'attempt.failed'::text, 'worker'::text, %L::uuid, %L::uuid, '{"attemptNo": 1, "exitCode": 3}'::jsonb, %s::bigint),
                  (%s::bigint, 'run.retry_scheduled'::text, 'worker'::text, %L::uuid, %L::uuid, jsonb_build_object('status', 'retry_wait', 'retryAtMs', %s::bigint + 1000), %s::bigint)$$,
         :y_seq + 1, :'y_w', :'y_a', :y_end, :y_seq + 2, :'y_w', :'y_a', :y_end, :y_end),
  'retry: events attempt.failed then run.retry_scheduled, by the Worker, at the next two sequences');
select ok(pg_temp.stream_ok(:'y_r'), 'retry: the event stream is contiguous and runs.version = 1 + event count');
select ok(:'y_res'::jsonb::text !~ :'d_hex' and :'y_res'::jsonb::text !~ 'token-a' and :'y_res'::jsonb::text !~ :'tok_hex',
  'retry: the answer never carries the token or its digest');
select results_eq(format($$select r.status::text, r.retry_at_ms::bigint, r.current_attempt_id, r.ended_at_ms::bigint
                            from ql.runs r where r.id = %L$$, :'y_r'),
  format($$values ('retry_wait'::text, %s::bigint, null::uuid, null::bigint)$$, :y_end + 1000),
  'retry: the Run waits with retry_at_ms = ended + retryBackoffMs, no current Attempt, not ended');

-- ---------------------------------------------------------------------------------------------
-- A user cancel intent wins over the exit (and over a retry the plan would allow) → cancelled.
select pg_temp.mk_scenario('{"argv": ["sleep", "60"], "maxAttempts": 2, "retryBackoffMs": 1000}') as c_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'c_w', 'running') o \gset c_
reset role;
select ql.run_cancel_intent(:'c_r', 'user', 'user', null, ql.now_ms()) as c_intent \gset
select r.event_sequence as c_seq, a.version as c_av, a.callback_sequence as c_cb, ql.now_ms() as t0
  from ql.runs r join ql.run_attempts a on a.id = :'c_a' where r.id = :'c_r' \gset
set local role ql_runtime;
select pg_temp.complete(:'c_w', :'c_s', :'c_o', 1, 143, null, '[]') as c_res \gset
reset role;
select ql.now_ms() as t1, a.ended_at_ms as c_end from ql.run_attempts a where a.id = :'c_a' \gset
select is(:'c_res'::jsonb - 'snapshot', '{"status": "completed", "runStatus": "cancelled", "attemptStatus": "cancelled"}'::jsonb,
  'cancel intent: completed with run cancelled, attempt cancelled');
select is(:'c_res'::jsonb -> 'snapshot',
  (select ql.attempt_snapshot(r, a, l) from ql.runs r join ql.run_attempts a on a.run_id = r.id
     join ql.run_leases l on l.attempt_id = a.id where a.id = :'c_a'),
  'cancel intent: the answer carries the exact snapshot of the ended Attempt');
select results_eq(format($$select a.status::text, a.exit_code, a.error_code, a.version, a.callback_sequence,
                                  a.completion_digest is not null from ql.run_attempts a where a.id = %L$$, :'c_a'),
  format($$values (%L::text, %s::integer, %s::text, %s::bigint, %s::integer, true)$$,
         'cancelled', '143', $$null$$, :c_av + 1, :c_cb + 1),
  'cancel intent: the Attempt ends cancelled with its exit and error, version and callback sequence +1, and the completion digest');
select ok(:c_end between :t0 and :t1, 'cancel intent: the Attempt ends at database time');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.occurred_at_ms::bigint
                            from ql.run_events e where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'c_r', :c_seq),
  format($$values (%s::bigint, 'attempt.cancelled'::text, 'worker'::text, %L::uuid, %L::uuid, '{"attemptNo": 1, "exitCode": 143}'::jsonb, %s::bigint),
                  (%s::bigint, 'run.cancelled'::text, 'worker'::text, %L::uuid, %L::uuid, '{"status": "cancelled"}'::jsonb, %s::bigint)$$,
         :c_seq + 1, :'c_w', :'c_a', :c_end, :c_seq + 2, :'c_w', :'c_a', :c_end),
  'cancel intent: events attempt.cancelled then run.cancelled, by the Worker, at the next two sequences');
select ok(pg_temp.stream_ok(:'c_r'), 'cancel intent: the event stream is contiguous and runs.version = 1 + event count');
select ok(:'c_res'::jsonb::text !~ :'d_hex' and :'c_res'::jsonb::text !~ 'token-a' and :'c_res'::jsonb::text !~ :'tok_hex',
  'cancel intent: the answer never carries the token or its digest');
select results_eq(format($$select e.type, e.actor_kind::text from ql.run_events e where e.run_id = %L and e.sequence >= %s
                            order by e.sequence$$, :'c_r', :c_intent),
  $$values ('run.cancel_requested'::text, 'user'::text), ('attempt.cancelled', 'worker'), ('run.cancelled', 'worker')$$,
  'cancel intent: run.cancel_requested, attempt.cancelled, run.cancelled in order');

-- ---------------------------------------------------------------------------------------------
-- The timeout intent written by lease control → timed_out, even for exit 0.
select pg_temp.mk_scenario('{"argv": ["sleep", "60"], "timeoutMs": 5000}') as t_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'t_w', 'running') o \gset t_
reset role;
select pg_temp.age_attempt(:'t_o', 10000) \gset
set local role ql_runtime;
select pg_temp.lease(:'t_w', :'t_s', :'t_o', 1) ->> 'stopReason' as t_reason \gset
reset role;
select is(:'t_reason'::text, 'timeout', 'setup: lease control wrote the timeout intent');
select r.event_sequence as t_seq, a.version as t_av, a.callback_sequence as t_cb, ql.now_ms() as t0
  from ql.runs r join ql.run_attempts a on a.id = :'t_a' where r.id = :'t_r' \gset
set local role ql_runtime;
select pg_temp.complete(:'t_w', :'t_s', :'t_o', 2, 0, null, '[]') as t_res \gset
reset role;
select ql.now_ms() as t1, a.ended_at_ms as t_end from ql.run_attempts a where a.id = :'t_a' \gset
select is(:'t_res'::jsonb - 'snapshot', '{"status": "completed", "runStatus": "timed_out", "attemptStatus": "timed_out"}'::jsonb,
  'timeout intent: completed with run timed_out, attempt timed_out');
select is(:'t_res'::jsonb -> 'snapshot',
  (select ql.attempt_snapshot(r, a, l) from ql.runs r join ql.run_attempts a on a.run_id = r.id
     join ql.run_leases l on l.attempt_id = a.id where a.id = :'t_a'),
  'timeout intent: the answer carries the exact snapshot of the ended Attempt');
select results_eq(format($$select a.status::text, a.exit_code, a.error_code, a.version, a.callback_sequence,
                                  a.completion_digest is not null from ql.run_attempts a where a.id = %L$$, :'t_a'),
  format($$values (%L::text, %s::integer, %s::text, %s::bigint, %s::integer, true)$$,
         'timed_out', '0', $$null$$, :t_av + 1, :t_cb + 1),
  'timeout intent: the Attempt ends timed_out with its exit and error, version and callback sequence +1, and the completion digest');
select ok(:t_end between :t0 and :t1, 'timeout intent: the Attempt ends at database time');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.actor_id, e.attempt_id, e.payload, e.occurred_at_ms::bigint
                            from ql.run_events e where e.run_id = %L and e.sequence > %s order by e.sequence$$, :'t_r', :t_seq),
  format($$values (%s::bigint, 'attempt.timed_out'::text, 'worker'::text, %L::uuid, %L::uuid, '{"attemptNo": 1, "exitCode": 0}'::jsonb, %s::bigint),
                  (%s::bigint, 'run.timed_out'::text, 'worker'::text, %L::uuid, %L::uuid, '{"status": "timed_out"}'::jsonb, %s::bigint)$$,
         :t_seq + 1, :'t_w', :'t_a', :t_end, :t_seq + 2, :'t_w', :'t_a', :t_end),
  'timeout intent: events attempt.timed_out then run.timed_out, by the Worker, at the next two sequences');
select ok(pg_temp.stream_ok(:'t_r'), 'timeout intent: the event stream is contiguous and runs.version = 1 + event count');
select ok(:'t_res'::jsonb::text !~ :'d_hex' and :'t_res'::jsonb::text !~ 'token-a' and :'t_res'::jsonb::text !~ :'tok_hex',
  'timeout intent: the answer never carries the token or its digest');
select results_eq(format($$select e.type, e.actor_kind::text from ql.run_events e where e.run_id = %L and e.sequence > 2
                            order by e.sequence$$, :'t_r'),
  $$values ('run.cancel_requested'::text, 'system'::text), ('attempt.timed_out', 'worker'), ('run.timed_out', 'worker')$$,
  'timeout intent: run.cancel_requested by the system, then attempt.timed_out and run.timed_out');

-- ---------------------------------------------------------------------------------------------
-- Scenario V: a running Attempt, nothing stored, Lease version 1. Every call below would otherwise complete it.
select pg_temp.mk_scenario() as v_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'v_w', 'running') o \gset v_
reset role;
select pg_temp.mk_run(r.task_revision_id) as v_r2 from ql.runs r where r.id = :'v_r' \gset
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', null, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_version"}', 'a NULL lease version is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL lease version is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 0, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_version"}', 'lease version 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease version 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', -1, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_version"}', 'a negative lease version is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative lease version is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 9007199254740992, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_version"}', 'a lease version above 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease version above 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, -1, null, '[]'),
  '{"status": "invalid", "reason": "exit_code"}', 'a negative exit code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative exit code is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 256, null, '[]'),
  '{"status": "invalid", "reason": "exit_code"}', 'an exit code above 255 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'exit code above 255 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, 'Bad-Code', '[]'),
  '{"status": "invalid", "reason": "error_code"}', 'an error code outside [a-z0-9_.] is invalid');
reset role;
select is(pg_temp.state(), :'before', 'malformed error code is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, repeat('a', 65), '[]'),
  '{"status": "invalid", "reason": "error_code"}', 'an error code of 65 characters is invalid');
reset role;
select is(pg_temp.state(), :'before', 'long error code is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, '', '[]'),
  '{"status": "invalid", "reason": "error_code"}', 'an empty error code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'empty error code is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, null, null, '[]'),
  '{"status": "invalid", "reason": "error_code"}', 'neither exit code nor error code is invalid');
reset role;
select is(pg_temp.state(), :'before', 'missing exit and error is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, null),
  '{"status": "invalid", "reason": "artifacts"}', 'NULL receipts are invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL receipts are invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '{}'),
  '{"status": "invalid", "reason": "artifacts"}', 'receipts that are not an array are invalid');
reset role;
select is(pg_temp.state(), :'before', 'non-array receipts are invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": 5}, {"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": 5}, {"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": 5}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'more than two receipts are invalid');
reset role;
select is(pg_temp.state(), :'before', 'three receipts are invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[1]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a receipt that is not an object is invalid');
reset role;
select is(pg_temp.state(), :'before', 'scalar receipt is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab"}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a receipt without size is invalid');
reset role;
select is(pg_temp.state(), :'before', 'receipt missing a key is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": 5, "kind": "log"}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a receipt with an unknown key is invalid');
reset role;
select is(pg_temp.state(), :'before', 'receipt with an extra key is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0B5C2F5E-4A43-4C55-9E0E-4F6A3C1D2E7F", "sha256": "abababababababababababababababababababababababababababababababab", "size": 5}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a non-canonical (upper-case) artifact id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'upper-case artifact id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": 5, "sha256": "abababababababababababababababababababababababababababababababab", "size": 5}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'an artifact id that is not a string is invalid');
reset role;
select is(pg_temp.state(), :'before', 'numeric artifact id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababa", "size": 5}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a 63-digit SHA-256 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'short SHA-256 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB", "size": 5}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'an upper-case SHA-256 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'upper-case SHA-256 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": "5"}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a size that is not a number is invalid');
reset role;
select is(pg_temp.state(), :'before', 'string size is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": -1}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a negative size is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative size is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": 1.5}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a fractional size is invalid');
reset role;
select is(pg_temp.state(), :'before', 'fractional size is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[{"artifactId": "0b5c2f5e-4a43-4c55-9e0e-4f6a3c1d2e7f", "sha256": "abababababababababababababababababababababababababababababababab", "size": 1234567890}]'),
  '{"status": "invalid", "reason": "artifacts"}', 'a size of ten digits is invalid');
reset role;
select is(pg_temp.state(), :'before', 'ten-digit size is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(null, :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "worker_id"}', 'a NULL worker id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL worker id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', null, 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "session_id"}', 'a NULL session id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL session id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', null, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "worker_generation"}', 'a NULL worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL worker generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 0, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "worker_generation"}', 'worker generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', -1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "worker_generation"}', 'a negative worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative worker generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 9007199254740992, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "worker_generation"}', 'a worker generation above 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation above 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, null, :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "project_id"}', 'a NULL project id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL project id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', null, :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "run_id"}', 'a NULL run id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL run id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', null, :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "attempt_id"}', 'a NULL attempt id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL attempt id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', null, 1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "offer_id"}', 'a NULL offer id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL offer id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', null, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_generation"}', 'a NULL lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL lease generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 0, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_generation"}', 'lease generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', -1, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_generation"}', 'a negative lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative lease generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 9007199254740992, :'d', 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "lease_generation"}', 'a lease generation above 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation above 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, null, 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "token_digest"}', 'a NULL token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL token digest is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, substring(:'d'::bytea from 1 for 31), 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "token_digest"}', 'a 31-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', '31-byte token digest is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, (:'d'::bytea || '\x00'::bytea), 1, 0, null, '[]'),
  '{"status": "invalid", "reason": "token_digest"}', 'a 33-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', '33-byte token digest is invalid and nothing changes');

-- not_found, identity and liveness fences (scenario X is the other Worker).
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', gen_random_uuid(), 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'an unknown offer beside the Attempt''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'unknown offer is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'x_w', :'x_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "not_found", "reason": "offer"}', 'another Worker''s offer does not exist for this Worker');
reset role;
select is(pg_temp.state(), :'before', 'offer of another Worker is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'x_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'another Project''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Project''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r2', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'another Run of the same Project is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Run''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'x_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "not_found", "reason": "offer"}', 'another Worker''s Attempt named under this offer is not_found: it does not exist for this one');
reset role;
select is(pg_temp.state(), :'before', 'another Attempt''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', gen_random_uuid(), 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "stale_session"}', 'an unknown session is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'unknown session is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'x_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "stale_session"}', 'another Worker''s live session is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'another Worker''s session is fenced and nothing changes');
set local role ql_runtime;
select pg_temp.open_session(:'v_w') as v_s_new \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "stale_session"}', 'a session replaced by a newer open is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'replaced session is fenced and nothing changes');
\set v_s :v_s_new
update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1 where id = :'v_s';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "session_expired"}', 'a live session past its expiry is fenced session_expired');
reset role;
select is(pg_temp.state(), :'before', 'expired session is fenced and nothing changes');
update ql.worker_sessions set expires_at_ms = ql.now_ms() + 120000 where id = :'v_s';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 2, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "stale_generation"}', 'a worker generation other than the session''s is fenced stale_generation');
reset role;
select is(pg_temp.state(), :'before', 'wrong worker generation is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 2, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "stale_lease_generation"}', 'another lease generation is fenced stale_lease_generation');
reset role;
select is(pg_temp.state(), :'before', 'wrong lease generation is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d_b', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "token_mismatch"}', 'another token''s digest is fenced token_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'wrong token is fenced and nothing changes');

-- Expired Lease: the Worker may no longer complete.
select pg_temp.age_attempt(:'v_o', 120000) \gset
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.attempt_complete_v1(:'v_w', :'v_s', 1, :'v_p', :'v_r', :'v_a', :'v_oid', 1, :'d', 1, 0, null, '[]'),
  '{"status": "fenced", "reason": "lease_expired"}', 'completion after the Lease expired is fenced lease_expired');
reset role;
select is(pg_temp.state(), :'before', 'completion after Lease expiry is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- State drift: claimed (before the start barrier), and Attempts that ended otherwise (abandoned, lost, start failure).
select pg_temp.mk_scenario() as q_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'q_w', 'claimed') o \gset q_
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.complete(:'q_w', :'q_s', :'q_o', 1, 0),
  '{"status": "fenced", "reason": "state_drift"}', 'a claimed Attempt is fenced state_drift');
reset role;
select is(pg_temp.state(), :'before', 'completion of a claimed Attempt is fenced and nothing changes');
update ql.run_attempts set status = 'abandoned', ended_at_ms = ql.now_ms() where id = :'q_a';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.complete(:'q_w', :'q_s', :'q_o', 1, 0),
  '{"status": "fenced", "reason": "state_drift"}', 'an abandoned Attempt is fenced state_drift');
reset role;
select is(pg_temp.state(), :'before', 'completion of an abandoned Attempt is fenced and nothing changes');
select pg_temp.mk_scenario() as l_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'l_w', 'running') o \gset l_
reset role;
update ql.run_attempts set status = 'lost', ended_at_ms = ql.now_ms() where id = :'l_a';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.complete(:'l_w', :'l_s', :'l_o', 1, 0),
  '{"status": "fenced", "reason": "state_drift"}', 'a lost Attempt is fenced state_drift');
reset role;
select is(pg_temp.state(), :'before', 'completion of a lost Attempt is fenced and nothing changes');
select pg_temp.mk_scenario() as z_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'z_w', 'starting') o \gset z_
reset role;
set local role ql_runtime;
select is(pg_temp.activate('start_failure', :'z_w', :'z_s', :'z_o', 'token-a', 'spawn_failed') ->> 'status', 'applied',
  'setup: the start failure ends the Attempt failed');
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.complete(:'z_w', :'z_s', :'z_o', 1, 0),
  '{"status": "fenced", "reason": "state_drift"}', 'an Attempt ended by a start failure is fenced state_drift');
reset role;
select is(pg_temp.state(), :'before', 'completion after a start failure is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- No raw token anywhere in the database.
select ok(pg_temp.state() !~ 'token-a' and pg_temp.state() !~ :'tok_hex', 'the raw token (text or bytes) is nowhere in the stored rows');
select ok(not exists (select 1 from ql.run_events e where e.payload::text ~ :'d_hex'), 'no event payload carries the token digest');

select * from finish();
rollback;
