-- Tests ql_api.output_lost_v1: once an Attempt's Lease ran out and its append is refused, its Worker records the
-- output it held as lost: one output.lost event per Attempt and stream with the bytes written and the bytes stored;
-- a second call answers already_recorded and writes nothing; the identity fence (another token, another Worker's
-- session, an unknown offer) and invalid input are refused and change nothing; the runtime role executes it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(16);

create function pg_temp.app(o jsonb, p_stream text, p_offset bigint, p_data bytea)
returns jsonb language sql
return ql_api.output_append_v1((o ->> 'workerId')::uuid, (o ->> 'sessionId')::uuid, 1, (o ->> 'projectId')::uuid,
  (o ->> 'runId')::uuid, (o ->> 'attemptId')::uuid, (o ->> 'offerId')::uuid, (o ->> 'leaseGeneration')::bigint,
  sha256(convert_to('token-a', 'UTF8')), p_stream, p_offset, p_data);
create function pg_temp.lost(o jsonb, p_stream text, p_written bigint, p_token text default 'token-a')
returns jsonb language sql
return ql_api.output_lost_v1((o ->> 'workerId')::uuid, (o ->> 'sessionId')::uuid, 1, (o ->> 'projectId')::uuid,
  (o ->> 'runId')::uuid, (o ->> 'attemptId')::uuid, (o ->> 'offerId')::uuid, (o ->> 'leaseGeneration')::bigint,
  sha256(convert_to(p_token, 'UTF8')), p_stream, p_written);

select is_definer('ql_api', 'output_lost_v1',
  array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bigint'],
  'output_lost_v1 is SECURITY DEFINER');

-- A running Attempt that stored 6 bytes of stdout, then its Lease ran out and recovery marked it lost.
select pg_temp.mk_scenario() as w \gset
select pg_temp.offer_at(:'w', 'running') as o \gset
set local role ql_runtime;
select is(pg_temp.app(:'o', 'stdout', 0, convert_to(E'hello\n', 'UTF8')) ->> 'nextOffset', '6', 'six bytes of stdout stored while the Lease held');
reset role;
select pg_temp.age_attempt(:'o', 600000);
select ql_api.lease_expiry_reconcile_v1(10, 1000) ->> 'status' as reconciled \gset
set local role ql_runtime;
select is(pg_temp.app(:'o', 'stdout', 6, convert_to(E'world\n', 'UTF8')), '{"status": "fenced", "reason": "state_drift"}',
  'the append of the rest is refused: the Attempt is lost');
reset role;

-- Refusals change nothing.
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.lost(:'o', 'stdin', 12), '{"status": "invalid", "reason": "stream"}', 'an unknown stream is invalid');
select is(pg_temp.lost(:'o', 'stdout', -1), '{"status": "invalid", "reason": "size"}', 'a negative count is invalid');
select is(pg_temp.lost(:'o', 'stdout', null), '{"status": "invalid", "reason": "size"}', 'a NULL count is invalid');
select is(pg_temp.lost(:'o', 'stdout', 12, 'token-b'), '{"status": "fenced", "reason": "token_mismatch"}',
  'another token is fenced');
select is(pg_temp.lost(:'o' || jsonb_build_object('offerId', gen_random_uuid()), 'stdout', 12),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'an unknown offer beside the Attempt''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'the refused calls change nothing');

-- Recorded once per stream, with what was written and what is stored.
set local role ql_runtime;
select is(pg_temp.lost(:'o', 'stdout', 12), '{"status": "recorded", "stream": "stdout", "writtenBytes": 12, "storedBytes": 6}',
  'the lost stdout is recorded: 12 bytes written, 6 stored');
select is(pg_temp.lost(:'o', 'stderr', 40), '{"status": "recorded", "stream": "stderr", "writtenBytes": 40, "storedBytes": 0}',
  'a stream that stored nothing is recorded with 0 stored');
reset role;
select pg_temp.state() as recorded \gset
set local role ql_runtime;
select is(pg_temp.lost(:'o', 'stdout', 99), '{"status": "already_recorded", "stream": "stdout", "writtenBytes": 12, "storedBytes": 6}',
  'a second call answers what the first recorded');
reset role;
select is(pg_temp.state(), :'recorded', 'and writes nothing');
select results_eq(
  format($$select type, actor_kind::text, actor_id, attempt_id, payload from ql.run_events
            where run_id = %L and type = 'output.lost' order by sequence$$, :'o'::jsonb ->> 'runId'),
  format($$values ('output.lost'::text, 'worker'::text, %L::uuid, %L::uuid, '{"attemptNo": 1, "stream": "stdout", "writtenBytes": 12, "storedBytes": 6}'::jsonb),
                  ('output.lost', 'worker', %L::uuid, %L::uuid, '{"attemptNo": 1, "stream": "stderr", "writtenBytes": 40, "storedBytes": 0}'::jsonb)$$,
         :'w', :'o'::jsonb ->> 'attemptId', :'w', :'o'::jsonb ->> 'attemptId'),
  'two output.lost events, by the Worker, on the lost Attempt');
select ok(pg_temp.stream_ok((:'o'::jsonb ->> 'runId')::uuid), 'the Run''s event stream stays contiguous');
select is((select status from ql.runs where id = (:'o'::jsonb ->> 'runId')::uuid) in ('lost', 'retry_wait', 'failed'), true,
  'no status changed by it (the Run is where recovery put it)');

select * from finish();
rollback;
