-- Tests ql_api.run_output_v1: the output of a Run's latest Attempt (or of the Attempt numbered), its streams'
-- totals (what reached the database, what is kept, the head cap) and pages of chunks of both streams in
-- arrival order, bounded in bytes (at least one chunk) and followed by a seq cursor with `more`; a Run without
-- an Attempt; another Project's Run and a missing one are the same not_found, a missing Attempt number is
-- not_found attempt; every refusal is a typed invalid; it writes nothing; only the runtime role may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(46);

create function pg_temp.app(o jsonb, p_stream text, p_offset bigint, p_data bytea)
returns jsonb language sql
return ql_api.output_append_v1((o ->> 'workerId')::uuid, (o ->> 'sessionId')::uuid, 1, (o ->> 'projectId')::uuid,
  (o ->> 'runId')::uuid, (o ->> 'attemptId')::uuid, (o ->> 'offerId')::uuid, (o ->> 'leaseGeneration')::bigint,
  sha256(convert_to('token-a', 'UTF8')), p_stream, p_offset, p_data);

-- A page's chunks as "stream@offset:text" (data decoded), in the order given.
create function pg_temp.seen(p_page jsonb) returns text language sql
return (select string_agg(format('%s@%s:%s', e ->> 'stream', e ->> 'offset', convert_from(decode(e ->> 'data', 'base64'), 'UTF8')),
                          ' ' order by n)
          from jsonb_array_elements(p_page -> 'chunks') with ordinality c(e, n));

-- Everything stored, output included: a read must leave it alone.
create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('stream ' || s::text, E'\n' order by s.attempt_id, s.stream) from ql.output_streams s),
  (select string_agg('chunk ' || c::text, E'\n' order by c.attempt_id, c.stream, c.byte_offset) from ql.output_chunks c));

-- ---------------------------------------------------------------------------------------------
-- Structure.
select has_function('ql_api', 'run_output_v1', array['uuid', 'uuid', 'integer', 'bigint', 'integer'],
  'run_output_v1(project, run, attempt number, after seq, max bytes) exists');
select is_definer('ql_api', 'run_output_v1', array['uuid', 'uuid', 'integer', 'bigint', 'integer'], 'run_output_v1 is SECURITY DEFINER');
select volatility_is('ql_api', 'run_output_v1', array['uuid', 'uuid', 'integer', 'bigint', 'integer'], 'stable',
  'run_output_v1 is STABLE: it reads one snapshot');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.run_output_v1(uuid, uuid, integer, bigint, integer)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'run_output_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'run_output_v1', array['uuid', 'uuid', 'integer', 'bigint', 'integer'], 'ql_runtime',
  array['EXECUTE'], 'the runtime role may execute run_output_v1');
select function_privs_are('ql_api', 'run_output_v1', array['uuid', 'uuid', 'integer', 'bigint', 'integer'], 'public',
  array[]::text[], 'PUBLIC may not execute run_output_v1');

-- ---------------------------------------------------------------------------------------------
-- A Run with two Attempts: the first wrote to both streams and failed, the second is claimed.
select pg_temp.mk_scenario('{"argv": ["true"], "maxAttempts": 2, "retryBackoffMs": 0}') as w \gset
set local role ql_runtime;
select o, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a1, o ->> 'sessionId' as s
  from pg_temp.offer_at(:'w', 'running') o \gset
select pg_temp.app(:'o', 'stdout', 0, 'one '::bytea) ->> 'status' as x1 \gset
select pg_temp.app(:'o', 'stderr', 0, 'warn'::bytea) ->> 'status' as x2 \gset
select pg_temp.app(:'o', 'stdout', 4, 'two '::bytea) ->> 'status' as x3 \gset
select pg_temp.app(:'o', 'stdout', 8, 'three-and-more'::bytea) ->> 'status' as x4 \gset
select pg_temp.app(:'o', 'stderr', 4, '!'::bytea) ->> 'status' as x5 \gset
reset role;
select is(array[:'x1', :'x2', :'x3', :'x4', :'x5'], array['appended', 'appended', 'appended', 'appended', 'appended'],
  'setup: five chunks appended to two streams');
select array_agg(c.seq order by c.seq) as seqs from ql.output_chunks c where c.attempt_id = :'a1' \gset
set local role ql_runtime;
select ql_api.run_output_v1(:'p', :'r') as page \gset
reset role;
select is(:'page'::jsonb - 'attempt' - 'chunks', jsonb_build_object(
    'status', 'output', 'runStatus', 'running', 'attempts', 1, 'more', false,
    'streams', jsonb_build_array(
      jsonb_build_object('stream', 'stdout', 'nextOffset', 22, 'headBytes', 524288, 'keptBytes', 22),
      jsonb_build_object('stream', 'stderr', 'nextOffset', 5, 'headBytes', 524288, 'keptBytes', 5))),
  'the Run''s status, its Attempt count and each stream''s totals (stdout first)');
select is(:'page'::jsonb -> 'attempt', (select jsonb_build_object('attemptId', a.id, 'attemptNo', 1, 'status', 'running',
    'exitCode', null, 'errorCode', null, 'endedAtMs', null, 'claimedAtMs', a.claimed_at_ms,
    'startedAtMs', a.started_at_ms, 'workerName', (select w.name from ql.workers w where w.id = a.worker_id))
    from ql.run_attempts a where a.id = :'a1'),
  'the Attempt: its id, number, status, exit code, error code and end');
select is(pg_temp.seen(:'page'), 'stdout@0:one  stderr@0:warn stdout@4:two  stdout@8:three-and-more stderr@4:!',
  'every chunk of both streams, in arrival order, data as base64');
select is((select array_agg((e ->> 'seq')::bigint order by n) from jsonb_array_elements(:'page'::jsonb -> 'chunks') with ordinality c(e, n)),
  :'seqs'::bigint[], 'each chunk carries its seq');

-- Pages by bytes: chunks while the page's data stays within the bound, at least one.
set local role ql_runtime;
select ql_api.run_output_v1(:'p', :'r', null, null, 8) as pg1 \gset
select ql_api.run_output_v1(:'p', :'r', null, (:'pg1'::jsonb -> 'chunks' -> -1 ->> 'seq')::bigint, 8) as pg2 \gset
select ql_api.run_output_v1(:'p', :'r', null, (:'pg2'::jsonb -> 'chunks' -> -1 ->> 'seq')::bigint, 8) as pg3 \gset
select ql_api.run_output_v1(:'p', :'r', null, (:'pg3'::jsonb -> 'chunks' -> -1 ->> 'seq')::bigint, 8) as pg4 \gset
select ql_api.run_output_v1(:'p', :'r', 1, (:'seqs'::bigint[])[5], 8) as pg5 \gset
select ql_api.run_output_v1(:'p', :'r', null, null, 1) as tiny \gset
reset role;
select is(pg_temp.seen(:'pg1') || ' more=' || (:'pg1'::jsonb ->> 'more'), 'stdout@0:one  stderr@0:warn more=true',
  'a page of 8 bytes holds the first two chunks (4 + 4) and says more');
select is(pg_temp.seen(:'pg2') || ' more=' || (:'pg2'::jsonb ->> 'more'), 'stdout@4:two  more=true',
  'the next page starts after the cursor; 4 + 14 would exceed 8');
select is(pg_temp.seen(:'pg3') || ' more=' || (:'pg3'::jsonb ->> 'more'), 'stdout@8:three-and-more more=true',
  'a chunk larger than the bound is a page of its own');
select is(pg_temp.seen(:'pg4') || ' more=' || (:'pg4'::jsonb ->> 'more'), 'stderr@4:! more=false',
  'the last page says no more');
select is((:'pg5'::jsonb -> 'chunks') || jsonb_build_object('more', :'pg5'::jsonb -> 'more'), '[{"more": false}]'::jsonb,
  'after the last seq: no chunks, no more');
select is(pg_temp.seen(:'tiny'), 'stdout@0:one ', 'a bound of 1 byte still answers one chunk');
select ok((:'pg1'::jsonb - 'chunks' - 'more') = (:'page'::jsonb - 'chunks' - 'more'),
  'every page carries the same Run, Attempt and stream totals');
select ok(:'page'::text !~ E'\\\\n', 'base64 data has no line breaks');

-- A long chunk: base64 on one line, exact bytes.
select pg_temp.mk_scenario() as lw \gset
set local role ql_runtime;
select o as lo, o ->> 'projectId' as lp, o ->> 'runId' as lr from pg_temp.offer_at(:'lw', 'running') o \gset
select pg_temp.app(:'lo', 'stdout', 0, convert_to(repeat('0123456789', 10000), 'UTF8')) ->> 'status' as x6 \gset
select ql_api.run_output_v1(:'lp', :'lr') as long \gset
reset role;
select is(decode(:'long'::jsonb -> 'chunks' -> 0 ->> 'data', 'base64'), convert_to(repeat('0123456789', 10000), 'UTF8'),
  'a 100 kB chunk decodes to its exact bytes');
select ok(position(E'\n' in :'long'::jsonb -> 'chunks' -> 0 ->> 'data') = 0, 'its base64 is one line (no newline every 76 characters)');

-- A page holds at most 2048 chunks, however small.
select pg_temp.mk_scenario() as mw \gset
set local role ql_runtime;
select o as mo, o ->> 'projectId' as mp, o ->> 'runId' as mr from pg_temp.offer_at(:'mw', 'running') o \gset
select count(*) filter (where pg_temp.app(:'mo', 'stdout', k, '.'::bytea) ->> 'status' = 'appended') as n_small
  from generate_series(0, 2049) k \gset
select ql_api.run_output_v1(:'mp', :'mr') as many1 \gset
select ql_api.run_output_v1(:'mp', :'mr', null, (:'many1'::jsonb -> 'chunks' -> -1 ->> 'seq')::bigint) as many2 \gset
reset role;
select is(:'n_small'::int, 2050, 'setup: 2050 one-byte chunks appended');
select is(array[jsonb_array_length(:'many1'::jsonb -> 'chunks')::text, :'many1'::jsonb ->> 'more',
                jsonb_array_length(:'many2'::jsonb -> 'chunks')::text, :'many2'::jsonb ->> 'more'],
  array['2048', 'true', '2', 'false'], 'the first page stops at 2048 chunks (2048 bytes) and says more; the next has the last 2');

-- The kept and received bytes once the middle was dropped.
update ql.settings set output_head_bytes = 4, output_tail_bytes = 65536;
set local role ql_runtime;
select pg_temp.app(:'lo', 'stdout', 300000, 'end'::bytea) ->> 'status' as x7 \gset
select ql_api.run_output_v1(:'lp', :'lr') as gap \gset
reset role;
update ql.settings set output_head_bytes = 524288, output_tail_bytes = 524288;
select is(:'gap'::jsonb -> 'streams', '[{"stream": "stdout", "nextOffset": 300003, "headBytes": 4, "keptBytes": 100003}]'::jsonb,
  'nextOffset counts every byte received, keptBytes only those stored: the 200000 dropped ones are the difference');

-- The first Attempt fails; the retry's Attempt 2 is claimed and has no output yet.
set local role ql_runtime;
select pg_temp.complete(:'w', :'s', :'o', 1, 1) ->> 'status' as done \gset
select o2 ->> 'attemptId' as a2 from pg_temp.pull(:'w', :'s', 'token-b') o2 \gset
select ql_api.run_output_v1(:'p', :'r') as latest \gset
select ql_api.run_output_v1(:'p', :'r', 1) as first \gset
select ql_api.run_output_v1(:'p', :'r', 2) as second \gset
reset role;
select is(:'done'::text, 'completed', 'setup: Attempt 1 completes with exit code 1');
select ok(nullif(:'a2', '') is not null, 'setup: the retry is offered as Attempt 2');
select is(:'latest'::jsonb, jsonb_build_object('status', 'output', 'runStatus', 'queued', 'attempts', 2,
    'attempt', (select jsonb_build_object('attemptId', a.id, 'attemptNo', 2, 'status', 'claimed', 'exitCode', null,
                                          'errorCode', null, 'endedAtMs', null, 'claimedAtMs', a.claimed_at_ms,
                                          'startedAtMs', null, 'workerName', (select w.name from ql.workers w
                                          where w.id = a.worker_id)) from ql.run_attempts a where a.id = :'a2'),
    'streams', '[]'::jsonb, 'chunks', '[]'::jsonb, 'more', false),
  'without an Attempt number: the latest Attempt, with no output yet');
select is(:'second'::jsonb, :'latest'::jsonb, 'Attempt 2 named by its number is the same');
select is(:'first'::jsonb -> 'attempt', (select jsonb_build_object('attemptId', a.id, 'attemptNo', 1, 'status', 'failed',
    'exitCode', 1, 'errorCode', a.error_code, 'endedAtMs', a.ended_at_ms, 'claimedAtMs', a.claimed_at_ms,
    'startedAtMs', a.started_at_ms, 'workerName', (select w.name from ql.workers w where w.id = a.worker_id))
    from ql.run_attempts a where a.id = :'a1'),
  'Attempt 1 by its number: ended, failed, exit code 1');
select is(pg_temp.seen(:'first'), pg_temp.seen(:'page'), 'and its output is still there');
select is((:'first'::jsonb ->> 'attempts')::int, 2, 'attempts counts every Attempt of the Run');

-- A Run without an Attempt.
select pg_temp.mk_run(r.task_revision_id) as r0 from ql.runs r where r.id = :'r' \gset
set local role ql_runtime;
select is(ql_api.run_output_v1(:'p', :'r0'), '{"status": "output", "runStatus": "queued", "attempt": null, "attempts": 0,
  "streams": [], "chunks": [], "more": false}'::jsonb, 'a Run without an Attempt: attempt null, nothing else');
select is(ql_api.run_output_v1(:'p', :'r0', 1), '{"status": "not_found", "reason": "attempt"}',
  'and its Attempt 1 is not_found attempt');
select is(ql_api.run_output_v1(:'p', :'r', 3), '{"status": "not_found", "reason": "attempt"}',
  'an Attempt number the Run has not reached is not_found attempt');

-- Not found: another Project's Run, a missing Run.
reset role;
select pg_temp.mk_project() as other \gset
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(ql_api.run_output_v1(:'other', :'r'), '{"status": "not_found", "reason": "run"}',
  'another Project''s Run is not_found run');
select is(ql_api.run_output_v1(:'p', gen_random_uuid()), '{"status": "not_found", "reason": "run"}',
  'a missing Run is not_found run');

-- Invalid input.
select is(ql_api.run_output_v1(null, :'r'), '{"status": "invalid", "reason": "project_id"}', 'a NULL project is invalid');
select is(ql_api.run_output_v1(:'p', null), '{"status": "invalid", "reason": "run_id"}', 'a NULL run is invalid');
select is(ql_api.run_output_v1(:'p', :'r', 0), '{"status": "invalid", "reason": "attempt"}', 'Attempt number 0 is invalid');
select is(ql_api.run_output_v1(:'p', :'r', 101), '{"status": "invalid", "reason": "attempt"}', 'Attempt number 101 is invalid');
select is(ql_api.run_output_v1(:'p', :'r', null, -1), '{"status": "invalid", "reason": "cursor"}', 'a negative cursor is invalid');
select is(ql_api.run_output_v1(:'p', :'r', null, null, 0), '{"status": "invalid", "reason": "limit"}', 'a bound of 0 bytes is invalid');
select is(ql_api.run_output_v1(:'p', :'r', null, null, 1048577), '{"status": "invalid", "reason": "limit"}', 'a bound over 1 MiB is invalid');
select is(ql_api.run_output_v1(:'p', :'r', null, 0, 1048576) -> 'more', 'false', 'cursor 0 and a 1 MiB bound are valid');
reset role;
select is(pg_temp.ostate(), :'before', 'reads and refusals change nothing');

-- Structure again: the scheduler may not read output.
select function_privs_are('ql_api', 'run_output_v1', array['uuid', 'uuid', 'integer', 'bigint', 'integer'], 'ql_scheduler',
  array[]::text[], 'the scheduler role may not read output');

select * from finish();
rollback;
