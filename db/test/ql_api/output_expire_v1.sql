-- Tests ql_api.output_expire_v1: one page deletes at most p_limit chunks received before now minus
-- output_retention_days, oldest first, whatever their Attempt's state, and never a younger one; then at most
-- p_limit streams of ended Attempts left without chunks (a running Attempt keeps its stream, and its end
-- offset, until it ends); nothing at all when retention is NULL; an out-of-range limit is invalid and changes
-- nothing; only the scheduler role may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(26);

create function pg_temp.app(o jsonb, p_stream text, p_offset bigint, p_data bytea)
returns jsonb language sql
return ql_api.output_append_v1((o ->> 'workerId')::uuid, (o ->> 'sessionId')::uuid, 1, (o ->> 'projectId')::uuid,
  (o ->> 'runId')::uuid, (o ->> 'attemptId')::uuid, (o ->> 'offerId')::uuid, (o ->> 'leaseGeneration')::bigint,
  sha256(convert_to('token-a', 'UTF8')), p_stream, p_offset, p_data);

-- Every output row, and everything else stored.
create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('stream ' || s::text, E'\n' order by s.attempt_id, s.stream) from ql.output_streams s),
  (select string_agg('chunk ' || c::text, E'\n' order by c.attempt_id, c.stream, c.byte_offset) from ql.output_chunks c));

create temporary table labels (label text, attempt_id uuid);

-- The chunks left, as "<label>@offset", in label and offset order.
create function pg_temp.left_chunks() returns text language sql
return (select string_agg(l.label || '@' || c.byte_offset, ' ' order by l.label, c.byte_offset)
          from ql.output_chunks c join labels l on l.attempt_id = c.attempt_id);
create function pg_temp.left_streams() returns text language sql
return (select string_agg(l.label || ':' || s.stream, ' ' order by l.label, s.stream)
          from ql.output_streams s join labels l on l.attempt_id = s.attempt_id);

-- A chunk p_days and p_ms old: as if appended then.
create function pg_temp.age(p_attempt uuid, p_offset bigint, p_days integer, p_ms bigint default 0) returns void
language sql begin atomic
  update ql.output_chunks set received_at_ms = ql.now_ms() - p_days * 86400000::bigint - p_ms
   where attempt_id = p_attempt and byte_offset = p_offset;
end;

-- ---------------------------------------------------------------------------------------------
-- Structure: a page of convergence, for the scheduler role only.
select is_definer('ql_api', 'output_expire_v1', array['integer'], 'output_expire_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'output_expire_v1', array['integer'], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role may execute output_expire_v1');
select function_privs_are('ql_api', 'output_expire_v1', array['integer'], 'ql_runtime', array[]::text[],
  'the runtime role may not');
select function_privs_are('ql_api', 'output_expire_v1', array['integer'], 'public', array[]::text[], 'PUBLIC may not');

-- ---------------------------------------------------------------------------------------------
-- Four Attempts with stdout output: a (ended: every chunk 40 days old), b (running: two old chunks and a new
-- one), c (running: every chunk old), d (ended: every chunk new).
select pg_temp.mk_scenario() as a_w, pg_temp.mk_scenario() as b_w, pg_temp.mk_scenario() as c_w, pg_temp.mk_scenario() as d_w \gset
set local role ql_runtime;
select o as a_o, o ->> 'attemptId' as a_a from pg_temp.offer_at(:'a_w', 'running') o \gset
select o as b_o, o ->> 'attemptId' as b_a from pg_temp.offer_at(:'b_w', 'running') o \gset
select o as c_o, o ->> 'attemptId' as c_a from pg_temp.offer_at(:'c_w', 'running') o \gset
select o as d_o, o ->> 'attemptId' as d_a from pg_temp.offer_at(:'d_w', 'running') o \gset
select count(*) filter (where x ->> 'status' = 'appended') as n_appended from (
  select pg_temp.app(:'a_o', 'stdout', 0, 'a0'::bytea) union all select pg_temp.app(:'a_o', 'stdout', 2, 'a2'::bytea)
  union all select pg_temp.app(:'a_o', 'stdout', 4, 'a4'::bytea) union all select pg_temp.app(:'b_o', 'stdout', 0, 'b0'::bytea)
  union all select pg_temp.app(:'b_o', 'stdout', 2, 'b2'::bytea) union all select pg_temp.app(:'b_o', 'stdout', 4, 'b4'::bytea)
  union all select pg_temp.app(:'c_o', 'stdout', 0, 'c0'::bytea) union all select pg_temp.app(:'c_o', 'stderr', 0, 'c0'::bytea)
  union all select pg_temp.app(:'d_o', 'stdout', 0, 'd0'::bytea)) q(x) \gset
select pg_temp.complete(:'a_w', (:'a_o'::jsonb ->> 'sessionId')::uuid, :'a_o', 1, 0) ->> 'status' as a_done,
       pg_temp.complete(:'d_w', (:'d_o'::jsonb ->> 'sessionId')::uuid, :'d_o', 1, 0) ->> 'status' as d_done \gset
reset role;
select is(array[:'n_appended', :'a_done', :'d_done'], array['9', 'completed', 'completed'],
  'setup: nine chunks appended; a and d completed');
insert into labels values ('a', :'a_a'), ('b', :'b_a'), ('c', :'c_a'), ('d', :'d_a');
-- Ages (oldest first): a@0, b@0, a@2, c (stdout), b@2, a@4, c (stderr); b@4 and d@0 are new.
select pg_temp.age(:'a_a', 0, 40, 7000), pg_temp.age(:'b_a', 0, 40, 6000), pg_temp.age(:'a_a', 2, 40, 5000),
       pg_temp.age(:'b_a', 2, 40, 3000), pg_temp.age(:'a_a', 4, 40, 2000) \gset
update ql.output_chunks set received_at_ms = ql.now_ms() - 40 * 86400000::bigint - case stream when 'stdout' then 4000 else 1000 end
 where attempt_id = :'c_a';
-- A chunk 29 days old stays.
update ql.output_chunks set received_at_ms = ql.now_ms() - 29 * 86400000::bigint where attempt_id = :'d_a';

-- ---------------------------------------------------------------------------------------------
-- Invalid limits and NULL retention change nothing.
select pg_temp.ostate() as before \gset
set local role ql_scheduler;
select is(ql_api.output_expire_v1(null), '{"status": "invalid", "reason": "limit"}', 'a NULL limit is invalid');
select is(ql_api.output_expire_v1(0), '{"status": "invalid", "reason": "limit"}', 'a limit of 0 is invalid');
select is(ql_api.output_expire_v1(1025), '{"status": "invalid", "reason": "limit"}', 'a limit over 1024 is invalid');
reset role;
select is(pg_temp.ostate(), :'before', 'invalid limits change nothing');
update ql.settings set output_retention_days = null;
set local role ql_scheduler;
select is(ql_api.output_expire_v1(1024), '{"status": "ok", "deleted": 0, "streamsDeleted": 0}',
  'with output_retention_days NULL nothing expires');
reset role;
select is(pg_temp.ostate(), :'before', 'and nothing changed');
update ql.settings set output_retention_days = 30;

-- ---------------------------------------------------------------------------------------------
-- Pages: oldest first, bounded.
set local role ql_scheduler;
select is(ql_api.output_expire_v1(2), '{"status": "ok", "deleted": 2, "streamsDeleted": 0}', 'a page of 2 deletes 2 chunks');
reset role;
select is(pg_temp.left_chunks(), 'a@2 a@4 b@2 b@4 c@0 c@0 d@0', 'the two oldest (a@0, b@0) went');
set local role ql_scheduler;
select is(ql_api.output_expire_v1(3), '{"status": "ok", "deleted": 3, "streamsDeleted": 0}', 'a page of 3 deletes 3 more');
reset role;
select is(pg_temp.left_chunks(), 'a@4 b@4 c@0 d@0', 'the next oldest (a@2, c stdout, b@2) went');
set local role ql_scheduler;
select is(ql_api.output_expire_v1(64), '{"status": "ok", "deleted": 2, "streamsDeleted": 1}',
  'the last old chunks go, and so does the emptied stream of the ended Attempt a');
reset role;
select is(pg_temp.left_chunks(), 'b@4 d@0', 'the new chunks and the 29-day-old one stay');
select is(pg_temp.left_streams(), 'b:stdout c:stdout c:stderr d:stdout',
  'the running Attempt c keeps its emptied streams; a''s stream is gone');
select is((select array_agg(next_offset order by stream) from ql.output_streams where attempt_id = :'c_a'), array[2, 2]::bigint[],
  'c''s stream rows recorded the ends of the chunks that went');
select is((select array_agg(e.next_offset order by s.stream) from ql.output_streams s
             cross join lateral ql.output_stream_end(s.attempt_id, s.stream) e where s.attempt_id = :'c_a'), array[2, 2]::bigint[],
  'so the streams'' ends are as before, and c''s next append goes on where it was');
select pg_temp.ostate() as before \gset
set local role ql_scheduler;
select is(ql_api.output_expire_v1(64), '{"status": "ok", "deleted": 0, "streamsDeleted": 0}', 'then nothing is left to expire');
reset role;
select is(pg_temp.ostate(), :'before', 'and an empty page changes nothing');

-- c ends: its two emptied stream rows stay (no chunk of theirs expires again) until its Run is pruned with them.
update ql.run_attempts set status = 'lost', ended_at_ms = ql.now_ms() where id = :'c_a';
set local role ql_scheduler;
select is(ql_api.output_expire_v1(1), '{"status": "ok", "deleted": 0, "streamsDeleted": 0}',
  'once c ended, a page finds nothing to expire');
reset role;
select is(pg_temp.left_streams(), 'b:stdout c:stdout c:stderr d:stdout', 'c''s empty stream rows wait for its Run''s prune');

-- A shorter retention reaches the 29-day-old chunk; its ended Attempt's stream follows.
update ql.settings set output_retention_days = 28;
set local role ql_scheduler;
select is(ql_api.output_expire_v1(64), '{"status": "ok", "deleted": 1, "streamsDeleted": 1}',
  'with 28 days, d''s chunk and stream expire');
reset role;
select is(pg_temp.left_chunks() || ' | ' || pg_temp.left_streams(), 'b@4 | b:stdout c:stdout c:stderr',
  'b''s new chunk is all the output left (and c''s empty stream rows)');

select * from finish();
rollback;
