-- Tests ql_api.output_append_v1: chunks of a running Attempt's stdout and stderr are stored at their offsets;
-- an exact replay (or any bytes already held) answers the same and changes nothing; an overlap stores only the
-- new suffix; a gap is refused until the head is complete and dropped after; an append across the head boundary
-- is split there; a 5 MB stream appended in 256 KiB chunks keeps its head intact and its last bytes, at least
-- output_tail_bytes of them and at most one chunk more; the Attempt fence, a claimed, ended or lost Attempt and
-- an expired Lease refuse new bytes but answer replays; every invalid input is refused before any lock and
-- changes nothing; the settings' bounds; the runtime role executes it and touches neither table.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(98);

-- An append with the ids of an offer_at() answer (o) and a token (only its digest reaches the database).
create function pg_temp.app(o jsonb, p_stream text, p_offset bigint, p_data bytea, p_token text default 'token-a')
returns jsonb language sql
return ql_api.output_append_v1((o ->> 'workerId')::uuid, (o ->> 'sessionId')::uuid, 1, (o ->> 'projectId')::uuid,
  (o ->> 'runId')::uuid, (o ->> 'attemptId')::uuid, (o ->> 'offerId')::uuid, (o ->> 'leaseGeneration')::bigint,
  sha256(convert_to(p_token, 'UTF8')), p_stream, p_offset, p_data);

-- The answer an append gives for a stream that ends at p_next (with the default settings unless given).
create function pg_temp.appended(p_stream text, p_next bigint, p_head bigint default 524288, p_tail bigint default 524288)
returns jsonb language sql
return jsonb_build_object('status', 'appended', 'stream', p_stream, 'nextOffset', p_next,
                          'headBytes', p_head, 'tailBytes', p_tail);

-- Everything pg_temp.state() holds, plus every output stream and chunk: what a refused append must leave alone.
create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('stream ' || s::text, E'\n' order by s.attempt_id, s.stream) from ql.output_streams s),
  (select string_agg('chunk ' || c::text, E'\n' order by c.attempt_id, c.stream, c.byte_offset) from ql.output_chunks c));

-- A stream's stored chunks as (offset, length) pairs, in offset order.
create function pg_temp.layout(p_attempt uuid, p_stream text) returns text language sql
return (select string_agg(format('%s+%s', c.byte_offset, octet_length(c.data)), ' ' order by c.byte_offset)
          from ql.output_chunks c where c.attempt_id = p_attempt and c.stream = p_stream::ql.output_stream);

-- The bytes of a synthetic log from byte p_from, p_len of them: line n (from 0) is n in 15 digits and a
-- newline, so every byte of the stream is known from its offset alone.
create function pg_temp.blob(p_from bigint, p_len integer) returns bytea language sql
return substr(convert_to((select string_agg(lpad(n::text, 15, '0') || E'\n', '' order by n)
                            from generate_series(p_from / 16, (p_from + p_len) / 16) n), 'UTF8'),
              (p_from % 16)::integer + 1, p_len);

select pg_temp.digest('token-a') as d, pg_temp.digest('token-b') as d_b \gset

-- ---------------------------------------------------------------------------------------------
-- Structure: a Worker command, SECURITY DEFINER, EXECUTE for the runtime role only; the tables are private.
select has_function('ql_api', 'output_append_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bigint', 'bytea'],
  'output_append_v1 exists with its typed parameters');
select is_definer('ql_api', 'output_append_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bigint', 'bytea'],
  'output_append_v1 is SECURITY DEFINER');
select function_returns('ql_api', 'output_append_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bigint', 'bytea'], 'jsonb',
  'output_append_v1 answers a jsonb result');
select is((select p.proconfig from pg_proc p
            where p.oid = 'ql_api.output_append_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bigint, bytea)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'output_append_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'output_append_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bigint', 'bytea'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute output_append_v1');
select function_privs_are('ql_api', 'output_append_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bigint', 'bytea'],
  'public', array[]::text[], 'PUBLIC may not execute output_append_v1');
set local role ql_runtime;
select throws_ok($$select count(*) from ql.output_chunks$$, '42501', 'permission denied for schema ql',
  'the runtime role cannot read output chunks outside the API');
select throws_ok($$select count(*) from ql.output_streams$$, '42501', 'permission denied for schema ql',
  'the runtime role cannot read output streams outside the API');
reset role;
select table_privs_are('ql', 'output_chunks', 'ql_runtime', array[]::text[], 'ql_runtime holds no privilege on ql.output_chunks');
select table_privs_are('ql', 'output_streams', 'ql_runtime', array[]::text[], 'ql_runtime holds no privilege on ql.output_streams');

-- The settings: defaults and bounds.
select results_eq($$select output_head_bytes, output_tail_bytes, output_retention_days from ql.settings$$,
  $$values (524288, 524288, 30)$$, 'defaults: 512 KiB of head and of tail per stream, kept 30 days');
select throws_ok($$update ql.settings set output_tail_bytes = 65535$$, '23514', null, 'a tail under 64 KiB is refused');
select throws_ok($$update ql.settings set output_tail_bytes = 16777217$$, '23514', null, 'a tail over 16 MiB is refused');
select throws_ok($$update ql.settings set output_head_bytes = -1$$, '23514', null, 'a negative head is refused');
select throws_ok($$update ql.settings set output_head_bytes = 16777217$$, '23514', null, 'a head over 16 MiB is refused');
select throws_ok($$update ql.settings set output_retention_days = 0$$, '23514', null, 'a retention of 0 days is refused');
select throws_ok($$update ql.settings set output_retention_days = 3651$$, '23514', null, 'a retention over 10 years is refused');
select lives_ok($$update ql.settings set output_retention_days = null, output_head_bytes = 0, output_tail_bytes = 65536$$,
  'retention NULL (keep), no head and a 64 KiB tail are accepted');
update ql.settings set output_retention_days = 30, output_head_bytes = 524288, output_tail_bytes = 524288;

-- ---------------------------------------------------------------------------------------------
-- Scenario A: a running Attempt writes to both streams; replays, overlaps and gaps.
select pg_temp.mk_scenario() as a_w \gset
set local role ql_runtime;
select o as a_o, o ->> 'attemptId' as a_a from pg_temp.offer_at(:'a_w', 'running') o \gset
reset role;
select pg_temp.state() as rest, ql.now_ms() as t0 \gset
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stdout', 0, 'hello '::bytea), pg_temp.appended('stdout', 6),
  'a first chunk is appended: the answer names the stream, its new end and the caps');
reset role;
select ql.now_ms() as t1 \gset
select results_eq(format($$select byte_offset, data from ql.output_chunks where attempt_id = %L$$, :'a_a'),
  $$values (0::bigint, 'hello '::bytea)$$, 'the chunk is stored at its offset');
select results_eq(format($$select next_offset, trimmed_to from ql.output_stream_end(%L, 'stdout')$$, :'a_a'),
  $$values (6::bigint, 0::bigint)$$, 'the stream''s end is its newest chunk''s (nothing trimmed yet)');
select results_eq(format($$select next_offset, trimmed_to from ql.output_streams where attempt_id = %L$$, :'a_a'),
  $$values (0::bigint, 0::bigint)$$, 'the stream''s row is as its first append made it: appends write only chunks');
select ok((select c.received_at_ms between :t0 and :t1 from ql.output_chunks c where c.attempt_id = :'a_a'),
  'the chunk is stamped with database time');
select is(pg_temp.state(), :'rest', 'an append changes no Run, Attempt, Lease, offer, event or session');
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stdout', 0, 'hello '::bytea), pg_temp.appended('stdout', 6),
  'an exact replay answers the same');
select is(pg_temp.app(:'a_o', 'stdout', 1, 'ell'::bytea), pg_temp.appended('stdout', 6),
  'bytes already held (a part of the chunk) answer the same');
reset role;
select is(pg_temp.ostate(), :'before', 'replays change nothing');
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stdout', 3, 'lo world'::bytea), pg_temp.appended('stdout', 11),
  'an overlapping chunk moves the end to its own end');
reset role;
select is(pg_temp.layout(:'a_a', 'stdout'), '0+6 6+5', 'only the new suffix is stored, where the stream ended');
select is((select string_agg(data, ''::bytea order by byte_offset) from ql.output_chunks where attempt_id = :'a_a'),
  'hello world'::bytea, 'the stored stream is exactly what the task wrote');
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stderr', 0, 'oops'::bytea), pg_temp.appended('stderr', 4),
  'stderr is a stream of its own, from offset 0');
reset role;
select is(pg_temp.layout(:'a_a', 'stdout') || ' | ' || pg_temp.layout(:'a_a', 'stderr'), '0+6 6+5 | 0+4',
  'each stream keeps its own chunks');
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stdout', 12, 'x'::bytea), '{"status": "invalid", "reason": "offset"}',
  'a gap before the head is complete is invalid offset');
reset role;
select is(pg_temp.ostate(), :'before', 'a refused gap changes nothing');
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stderr', 5, 'x'::bytea), '{"status": "invalid", "reason": "offset"}',
  'a gap in a short stderr is invalid offset too');
reset role;
select is(pg_temp.ostate(), :'before', 'the refused stderr gap changes nothing');
select pg_temp.mk_scenario() as g_w \gset
set local role ql_runtime;
select o as g_o, o ->> 'attemptId' as g_a from pg_temp.offer_at(:'g_w', 'running') o \gset
reset role;
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'g_o', 'stdout', 1, 'x'::bytea), '{"status": "invalid", "reason": "offset"}',
  'a first chunk that does not start at 0 is invalid offset');
reset role;
select is(pg_temp.ostate(), :'before', 'and it leaves no stream row behind');

-- ---------------------------------------------------------------------------------------------
-- Invalid input: refused before the fence (no lock, nothing changes).
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'a_o', null, 11, 'x'::bytea), '{"status": "invalid", "reason": "stream"}', 'a NULL stream is invalid');
select is(pg_temp.app(:'a_o', 'STDOUT', 11, 'x'::bytea), '{"status": "invalid", "reason": "stream"}', 'streams are exact: STDOUT is invalid');
select is(pg_temp.app(:'a_o', 'log', 11, 'x'::bytea), '{"status": "invalid", "reason": "stream"}', 'a stream other than stdout or stderr is invalid');
select is(pg_temp.app(:'a_o', 'stdout', null, 'x'::bytea), '{"status": "invalid", "reason": "offset"}', 'a NULL offset is invalid');
select is(pg_temp.app(:'a_o', 'stdout', -1, 'x'::bytea), '{"status": "invalid", "reason": "offset"}', 'a negative offset is invalid');
select is(pg_temp.app(:'a_o', 'stdout', 9007199254740992, 'x'::bytea), '{"status": "invalid", "reason": "offset"}', 'an offset above 2^53-1 is invalid');
select is(pg_temp.app(:'a_o', 'stdout', 9007199254740991, 'x'::bytea), '{"status": "invalid", "reason": "offset"}', 'a chunk ending above 2^53-1 is invalid offset');
select is(pg_temp.app(:'a_o', 'stdout', 11, null), '{"status": "invalid", "reason": "size"}', 'NULL data is invalid size');
select is(pg_temp.app(:'a_o', 'stdout', 11, ''::bytea), '{"status": "invalid", "reason": "size"}', 'empty data is invalid size');
select is(pg_temp.app(:'a_o', 'stdout', 11, pg_temp.blob(0, 262145)), '{"status": "invalid", "reason": "size"}', 'data over 256 KiB is invalid size');
select is(ql_api.output_append_v1(null, (:'a_o'::jsonb ->> 'sessionId')::uuid, 1, (:'a_o'::jsonb ->> 'projectId')::uuid,
            (:'a_o'::jsonb ->> 'runId')::uuid, :'a_a', (:'a_o'::jsonb ->> 'offerId')::uuid, 1, :'d', 'stdout', 11, 'x'::bytea),
  '{"status": "invalid", "reason": "worker_id"}', 'the fence''s inputs are checked as ql.attempt_fence checks them');
select is(ql_api.output_append_v1((:'a_o'::jsonb ->> 'workerId')::uuid, (:'a_o'::jsonb ->> 'sessionId')::uuid, 1,
            (:'a_o'::jsonb ->> 'projectId')::uuid, (:'a_o'::jsonb ->> 'runId')::uuid, :'a_a', gen_random_uuid(), 1, :'d',
            'stdout', 11, 'x'::bytea),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'an unknown offer beside the Attempt''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.ostate(), :'before', 'every invalid or unknown input changed nothing');

-- ---------------------------------------------------------------------------------------------
-- Fences: a wrong token, another lease generation; a claimed Attempt.
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stdout', 11, '!'::bytea, 'token-b'), '{"status": "fenced", "reason": "token_mismatch"}',
  'another token''s digest is fenced token_mismatch');
select is(pg_temp.app(:'a_o', 'stdout', 0, 'hello '::bytea, 'token-b'), '{"status": "fenced", "reason": "token_mismatch"}',
  'a replay with another token is fenced too (the fence comes first)');
select is(ql_api.output_append_v1((:'a_o'::jsonb ->> 'workerId')::uuid, (:'a_o'::jsonb ->> 'sessionId')::uuid, 1,
            (:'a_o'::jsonb ->> 'projectId')::uuid, (:'a_o'::jsonb ->> 'runId')::uuid, :'a_a', (:'a_o'::jsonb ->> 'offerId')::uuid,
            2, :'d', 'stdout', 11, '!'::bytea),
  '{"status": "fenced", "reason": "stale_lease_generation"}', 'another lease generation is fenced');
reset role;
select is(pg_temp.ostate(), :'before', 'fenced appends change nothing');
select pg_temp.mk_scenario() as c_w \gset
set local role ql_runtime;
select o as c_o from pg_temp.offer_at(:'c_w', 'claimed') o \gset
reset role;
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'c_o', 'stdout', 0, 'early'::bytea), '{"status": "fenced", "reason": "state_drift"}',
  'a claimed Attempt (before the starting ACK) is fenced state_drift');
reset role;
select is(pg_temp.ostate(), :'before', 'output to a claimed Attempt changes nothing');

-- A starting Attempt may already send output (the process exists before the running ACK arrives).
select pg_temp.mk_scenario() as s_w \gset
set local role ql_runtime;
select o as s_o from pg_temp.offer_at(:'s_w', 'starting') o \gset
select is(pg_temp.app(:'s_o', 'stdout', 0, 'booting'::bytea), pg_temp.appended('stdout', 7),
  'a starting Attempt''s output is appended');
reset role;

-- An expired Lease: new bytes are fenced, held bytes still answer.
select pg_temp.mk_scenario() as e_w \gset
set local role ql_runtime;
select o as e_o from pg_temp.offer_at(:'e_w', 'running') o \gset
select is(pg_temp.app(:'e_o', 'stdout', 0, 'abc'::bytea), pg_temp.appended('stdout', 3), 'setup: three bytes appended');
reset role;
select pg_temp.age_attempt(:'e_o', 120000) \gset
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'e_o', 'stdout', 3, 'def'::bytea), '{"status": "fenced", "reason": "lease_expired"}',
  'new bytes after the Lease expired are fenced lease_expired');
select is(pg_temp.app(:'e_o', 'stdout', 0, 'abc'::bytea), pg_temp.appended('stdout', 3),
  'a replay after the Lease expired still answers appended');
select is(pg_temp.app(:'e_o', 'stdout', 2, 'cd'::bytea), '{"status": "fenced", "reason": "lease_expired"}',
  'an overlap that brings new bytes is new bytes: fenced');
reset role;
select is(pg_temp.ostate(), :'before', 'after the Lease expired nothing changes');

-- An ended Attempt (completed): new bytes are fenced state_drift, held bytes answer.
set local role ql_runtime;
select is(pg_temp.complete(:'a_w', (:'a_o'::jsonb ->> 'sessionId')::uuid, :'a_o', 1, 0) ->> 'status', 'completed',
  'setup: scenario A completes');
reset role;
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'a_o', 'stdout', 11, '!'::bytea), '{"status": "fenced", "reason": "state_drift"}',
  'new bytes after the Attempt ended are fenced state_drift');
select is(pg_temp.app(:'a_o', 'stderr', 0, 'oops'::bytea), pg_temp.appended('stderr', 4),
  'an exact replay after the Attempt ended answers appended');
select is(pg_temp.app(:'a_o', 'stdout', 6, 'world'::bytea), pg_temp.appended('stdout', 11),
  'and so do other bytes the stream holds');
reset role;
select is(pg_temp.ostate(), :'before', 'after the end nothing changes');

-- A lost Attempt is fenced the same way.
select pg_temp.mk_scenario() as l_w \gset
set local role ql_runtime;
select o as l_o, o ->> 'attemptId' as l_a from pg_temp.offer_at(:'l_w', 'running') o \gset
reset role;
update ql.run_attempts set status = 'lost', ended_at_ms = ql.now_ms() where id = :'l_a';
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'l_o', 'stdout', 0, 'x'::bytea), '{"status": "fenced", "reason": "state_drift"}',
  'a lost Attempt is fenced state_drift');
reset role;
select is(pg_temp.ostate(), :'before', 'output to a lost Attempt changes nothing');

-- ---------------------------------------------------------------------------------------------
-- The head boundary: an append across it is two chunks; a gap once the head is complete is dropped output.
update ql.settings set output_head_bytes = 1000, output_tail_bytes = 65536;
select pg_temp.mk_scenario() as h_w \gset
set local role ql_runtime;
select o as h_o, o ->> 'attemptId' as h_a from pg_temp.offer_at(:'h_w', 'running') o \gset
select is(pg_temp.app(:'h_o', 'stdout', 0, pg_temp.blob(0, 600)), pg_temp.appended('stdout', 600, 1000, 65536),
  'the answer carries the current caps');
select is(pg_temp.app(:'h_o', 'stdout', 600, pg_temp.blob(600, 800)), pg_temp.appended('stdout', 1400, 1000, 65536),
  'an append across the head boundary is appended');
reset role;
select is(pg_temp.layout(:'h_a', 'stdout'), '0+600 600+400 1000+400', 'it is stored as two chunks, split at the boundary');
select ok((select (array_agg(c.seq order by c.byte_offset))[2] < (array_agg(c.seq order by c.byte_offset))[3]
             from ql.output_chunks c where c.attempt_id = :'h_a'), 'the head part arrives first (seq order)');
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'h_o', 'stdout', 900, pg_temp.blob(900, 500)), pg_temp.appended('stdout', 1400, 1000, 65536),
  'a replay across the boundary answers the same');
reset role;
select is(pg_temp.ostate(), :'before', 'and changes nothing');
set local role ql_runtime;
select is(pg_temp.app(:'h_o', 'stdout', 5000, pg_temp.blob(5000, 100)), pg_temp.appended('stdout', 5100, 1000, 65536),
  'once the head is complete, a gap is allowed: the Worker skipped ahead');
reset role;
select is(pg_temp.layout(:'h_a', 'stdout'), '0+600 600+400 1000+400 5000+100',
  'the skipped bytes are not stored: the offsets jump from 1400 to 5000');
select is((select next_offset from ql.output_stream_end(:'h_a', 'stdout')), 5100::bigint,
  'the stream''s end counts the dropped bytes');
-- No head at all: a gap is allowed from the start.
update ql.settings set output_head_bytes = 0;
select pg_temp.mk_scenario() as z_w \gset
set local role ql_runtime;
select o as z_o, o ->> 'attemptId' as z_a from pg_temp.offer_at(:'z_w', 'running') o \gset
select is(pg_temp.app(:'z_o', 'stderr', 70000, 'tail'::bytea), pg_temp.appended('stderr', 70004, 0, 65536),
  'with output_head_bytes 0 a stream may start past 0');
reset role;
select is(pg_temp.layout(:'z_a', 'stderr'), '70000+4', 'only the sent bytes are stored');
update ql.settings set output_head_bytes = 524288, output_tail_bytes = 524288;

-- ---------------------------------------------------------------------------------------------
-- A 5 MB stream in 256 KiB chunks (the first of 1000 bytes, so the head boundary falls inside a chunk).
select pg_temp.mk_scenario() as t_w \gset
set local role ql_runtime;
select o as t_o, o ->> 'attemptId' as t_a from pg_temp.offer_at(:'t_w', 'running') o \gset
reset role;
create temporary table answers (n integer, answer jsonb);
grant all on answers to ql_runtime;
set local role ql_runtime;
insert into answers select 0, pg_temp.app(:'t_o', 'stdout', 0, pg_temp.blob(0, 1000));
insert into answers select k + 1, pg_temp.app(:'t_o', 'stdout', 1000 + k * 262144::bigint, pg_temp.blob(1000 + k * 262144::bigint, 262144))
  from generate_series(0, 19) k order by k;
reset role;
select is((select array_agg((answer ->> 'nextOffset')::bigint order by n) from answers),
  (select array_agg(1000 + k * 262144::bigint order by k) from generate_series(0, 20) k),
  'each append answers the stream''s new end');
select 1000 + 20 * 262144 as total \gset
select results_eq(format($$select next_offset from ql.output_stream_end(%L, 'stdout')$$, :'t_a'),
  format($$values (%s::bigint)$$, :total), 'the stream''s end is every byte the task wrote: 5 MiB and 1000');
select ok(not exists (select 1 from ql.output_chunks c where c.attempt_id = :'t_a'
                       and c.byte_offset < 524288 and c.byte_offset + octet_length(c.data) > 524288),
  'no chunk straddles the head boundary');
select is((select string_agg(c.data, ''::bytea order by c.byte_offset) from ql.output_chunks c
            where c.attempt_id = :'t_a' and c.byte_offset < 524288), pg_temp.blob(0, 524288),
  'the head is intact: the first 512 KiB exactly');
select (select min(c.byte_offset) from ql.output_chunks c where c.attempt_id = :'t_a' and c.byte_offset >= 524288) as tail_from,
       (select sum(octet_length(c.data)) from ql.output_chunks c where c.attempt_id = :'t_a') as kept \gset
select is((select string_agg(c.data, ''::bytea order by c.byte_offset) from ql.output_chunks c
            where c.attempt_id = :'t_a' and c.byte_offset >= 524288), pg_temp.blob(:tail_from, :total - :tail_from),
  'the tail is contiguous and exactly the stream''s last bytes');
select ok(:total - :tail_from between 524288 and 524288 + 262144,
  'the kept tail is at least output_tail_bytes and at most one chunk more');
select is((select substr(c.data, octet_length(c.data) - 15) from ql.output_chunks c where c.attempt_id = :'t_a'
             order by c.byte_offset desc limit 1), pg_temp.blob(:total - 16, 16),
  'the last bytes the task wrote survive');
select ok(:kept = 524288 + (:total - :tail_from) and :total - :kept > 4000000,
  'kept = head + tail; dropped = total - kept: the middle 4 MB are gone');
select results_eq(format($$select trimmed_to from ql.output_stream_end(%L, 'stdout')$$, :'t_a'),
  format($$values (%s::bigint)$$, :tail_from), 'the stream''s trim watermark is where the kept tail starts');
-- A chunk planted below the watermark (where a trim already deleted everything) is not looked at by the next trim:
-- the range starts there, so a trim never walks the entries of chunks deleted before (an open snapshot keeps them).
insert into ql.output_chunks (attempt_id, stream, byte_offset, data, received_at_ms)
values (:'t_a', 'stdout', 600000, 'planted'::bytea, ql.now_ms());
select pg_temp.ostate() as planted \gset
set local role ql_runtime;
select is(pg_temp.app(:'t_o', 'stdout', :total, pg_temp.blob(:total, 262144)), pg_temp.appended('stdout', :total + 262144),
  'one more chunk is appended');
reset role;
select ok(exists (select from ql.output_chunks c where c.attempt_id = :'t_a' and c.byte_offset = 600000)
          and (select trimmed_to from ql.output_stream_end(:'t_a', 'stdout')) = :tail_from + 262144,
  'its trim deleted the oldest tail chunk from the watermark on, and never looked below it');
delete from ql.output_chunks c where c.attempt_id = :'t_a' and c.byte_offset = 600000;
select 1000 + 21 * 262144 as total \gset
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(pg_temp.app(:'t_o', 'stdout', :total - 262144, pg_temp.blob(:total - 262144, 262144)), pg_temp.appended('stdout', :total),
  'a replay of the last chunk answers the same');
select is(pg_temp.app(:'t_o', 'stdout', 1000, pg_temp.blob(1000, 262144)), pg_temp.appended('stdout', :total),
  'a replay of a chunk already dropped answers the same (its bytes were received)');
reset role;
select is(pg_temp.ostate(), :'before', 'and neither changes anything');
set local role ql_runtime;
select is(pg_temp.app(:'t_o', 'stdout', :total + 1000000, pg_temp.blob(:total + 1000000, 100000)),
  pg_temp.appended('stdout', :total + 1100000), 'the Worker skips ahead past the head: a gap is accepted');
reset role;
select is(pg_temp.layout(:'t_a', 'stdout'),
  (select string_agg(format('%s+%s', c.byte_offset, octet_length(c.data)), ' ' order by c.byte_offset)
     from ql.output_chunks c where c.attempt_id = :'t_a' and c.byte_offset < 524288) || ' ' || (:total + 1000000) || '+100000',
  'every tail chunk that ended before the new tail window is deleted; the head stays');

-- ---------------------------------------------------------------------------------------------
-- No raw token anywhere.
select ok(pg_temp.ostate() !~ 'token-a' and pg_temp.ostate() !~ encode(convert_to('token-a', 'UTF8'), 'hex'),
  'the raw token (text or bytes) is nowhere in the stored rows');

select * from finish();
rollback;
