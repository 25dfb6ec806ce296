-- Tests bundles (scripts travel with their task): the tables and the setting; ql_api.bundle_put_v1, bundle_seal_v1
-- and bundle_stat_v1 (an upload in 256 KiB chunks, out of order and resumed, sealed once the chunks hash to the
-- digest; a wrong digest deletes the upload; a complete bundle answers already_stored; the 32 MiB cap and a lowered
-- one; every refusal changes nothing); ql_api.bundle_chunk_v1 (a live Attempt whose plan names the bundle reads it,
-- the same bytes again on a repeat, and nothing is written; a fenced call, an expired Lease, an ended Attempt and a
-- digest the plan does not name get nothing); ql_api.task_revision_view_v1; retention by ql_api.prune_v1
-- (referenced bundles kept, unreferenced old ones and stale uploads deleted, in bounded pages); privileges: the
-- runtime role executes bundle_chunk_v1 and no other bundle function, and touches neither table.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(104);

-- Test data: archives of known bytes, kept in temporary tables (read by the test's owner only) chunk by chunk, with
-- their size and digest.
create temporary table blob_chunks (name text, idx int, data bytea not null, primary key (name, idx));
create temporary table blob_meta (name text primary key, size bigint not null, digest text not null);
-- p_size bytes from a seed: chunk c is a 256 KiB pattern of the seed whose first 4 bytes are c.
create function pg_temp.mk_blob(p_name text, p_size bigint, p_seed int) returns text language plpgsql as $$
begin
  insert into blob_chunks
  select p_name, c, substr(overlay(base.b placing int4send(c) from 1), 1, least(262144, p_size - c * 262144)::int)
    from (select string_agg(sha256(int4send(p_seed) || int4send(i)), ''::bytea order by i) b
            from generate_series(0, 8191) i) base
   cross join generate_series(0, ((p_size + 262143) / 262144)::int - 1) c;
  insert into blob_meta
  select p_name, p_size, encode(sha256(string_agg(c.data, ''::bytea order by c.idx)), 'hex')
    from blob_chunks c where c.name = p_name;
  return (select m.digest from blob_meta m where m.name = p_name);
end $$;
create function pg_temp.data(p_name text) returns bytea language sql
return (select string_agg(c.data, ''::bytea order by c.idx) from blob_chunks c where c.name = p_name);
create function pg_temp.hex(p_name text) returns text language sql
return (select m.digest from blob_meta m where m.name = p_name);
create function pg_temp.chunk(p_name text, p_index int) returns bytea language sql
return (select c.data from blob_chunks c where c.name = p_name and c.idx = p_index);
create function pg_temp.put(p_name text, p_index int) returns jsonb language sql
return (select ql_api.bundle_put_v1(m.digest, m.size, p_index, pg_temp.chunk(p_name, p_index))
          from blob_meta m where m.name = p_name);
-- Every chunk of a blob under its digest, then the seal; the seal's answer.
create function pg_temp.upload(p_name text,
                               p_entries jsonb default '[{"path": "run.sh", "kind": "file", "size": 20, "mode": 493}]')
returns jsonb language plpgsql as $$
declare
  v_put jsonb;
begin
  for i in 0 .. (select (m.size + 262143) / 262144 - 1 from blob_meta m where m.name = p_name) loop
    v_put := pg_temp.put(p_name, i);
    if v_put ->> 'status' not in ('stored', 'already_stored') then raise exception 'upload: %', v_put; end if;
  end loop;
  return ql_api.bundle_seal_v1(pg_temp.hex(p_name), p_entries);
end $$;
-- Everything stored: pg_temp.state(), the bundles and their chunks (not their bytes: which row version holds each),
-- revisions, tasks, settings.
create function pg_temp.bstate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('bundle ' || b::text, E'\n' order by b.digest) from ql.bundles b),
  (select string_agg(format('chunk %s %s %s %s %s', c.digest, c.idx, octet_length(c.data), c.xmin, c.ctid), E'\n'
                     order by c.digest, c.idx) from ql.bundle_chunks c),  -- a new or rewritten row has another xmin
  (select string_agg('revision ' || r::text, E'\n' order by r.id) from ql.task_execution_revisions r),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('settings ' || s::text, E'\n') from ql.settings s));
-- A refused call's answer, and whether everything stored is as it was.
create function pg_temp.refused(p_call text) returns text language plpgsql as $$
declare
  v_before text := pg_temp.bstate();
  v_result jsonb;
begin
  execute 'select ' || p_call into v_result;
  return v_result::text || case when pg_temp.bstate() is not distinct from v_before
                                then ' and nothing changed' else ' but the state changed' end;
end $$;
-- A fetch with the ids of an offer_at() answer (o) and a token (only its digest reaches the database).
create function pg_temp.fetch(o jsonb, p_digest text, p_index int, p_token text default 'token-a') returns jsonb
language sql
return ql_api.bundle_chunk_v1((o ->> 'workerId')::uuid, (o ->> 'sessionId')::uuid, 1, (o ->> 'projectId')::uuid,
  (o ->> 'runId')::uuid, (o ->> 'attemptId')::uuid, (o ->> 'offerId')::uuid, (o ->> 'leaseGeneration')::bigint,
  sha256(convert_to(p_token, 'UTF8')), p_digest, p_index);
-- The plan PostgreSQL chooses for a query, as text.
create function pg_temp.plan_of(p_sql text) returns text language plpgsql as $$
declare
  v_line text;
  v_plan text := '';
begin
  for v_line in execute 'explain ' || p_sql loop v_plan := v_plan || v_line || E'\n'; end loop;
  return v_plan;
end $$;
create function pg_temp.prune(p_limit integer) returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_scheduler;
  v := ql_api.prune_v1(p_limit);
  reset role;
  return v;
end $$;

select pg_temp.mk_blob('three', 600000, 1) as d3, pg_temp.mk_blob('one', 20, 2) as d1,
       pg_temp.mk_blob('other', 300000, 3) as dother, pg_temp.mk_blob('max', 33554432, 4) as dmax,
       pg_temp.mk_blob('wrong', 262145, 5) as dwrong, encode(sha256('never stored'::bytea), 'hex') as dnone \gset

-- ---------------------------------------------------------------------------------------------
-- Structure: the tables, the setting, the functions; privileges.
select has_table('ql', 'bundles', 'ql.bundles exists');
select has_table('ql', 'bundle_chunks', 'ql.bundle_chunks exists');
select col_is_pk('ql', 'bundle_chunks', array['digest', 'idx'], 'a chunk is keyed by (digest, idx)');
select has_column('ql', 'task_execution_revisions', 'plan_signature', 'a task revision has a plan_signature');
select is((select bundle_max_bytes from ql.settings), 33554432::bigint, 'bundle_max_bytes defaults to 32 MiB');
select throws_ok($$update ql.settings set bundle_max_bytes = 1048575$$, '23514', null, 'the cap is at least 1 MiB');
select throws_ok($$update ql.settings set bundle_max_bytes = 536870913$$, '23514', null, 'the cap is at most 512 MiB');
select throws_ok($$insert into ql.bundles (digest, size_bytes, chunk_count) values (repeat('A', 64), 1, 1)$$, '23514', null,
  'the table refuses a digest that is not 64 lowercase hex');
select throws_ok(format($$insert into ql.bundles (digest, size_bytes, chunk_count) values (%L, 262145, 1)$$, :'dnone'),
  '23514', null, 'the table refuses a chunk count that is not ceil(size / 256 KiB)');
select is(
  array(select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         where n.nspname = 'ql_api' and (p.proname like 'bundle%' or p.proname = 'task_revision_view_v1')
           and p.prosecdef and p.proconfig = array['search_path=pg_catalog, pg_temp'] order by 1),
  array['bundle_chunk_v1', 'bundle_put_v1', 'bundle_seal_v1', 'bundle_stat_v1', 'task_revision_view_v1'],
  'the five functions are SECURITY DEFINER with search_path pg_catalog, pg_temp');
select is(
  array(select p.proname || ':' || r from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         cross join unnest(array['public', 'ql_runtime', 'ql_scheduler', 'ql_readonly']) r
         where n.nspname = 'ql_api' and (p.proname like 'bundle%' or p.proname = 'task_revision_view_v1')
           and has_function_privilege(r, p.oid, 'execute') order by 1),
  array['bundle_chunk_v1:ql_runtime'],
  'the runtime role executes bundle_chunk_v1 and nothing else of them; no other role any (operators call as a DBA)');
set local role ql_runtime;
select throws_ok(format($$select ql_api.bundle_put_v1(%L, 20, 0, '\x00'::bytea)$$, :'d1'), '42501',
  'permission denied for function bundle_put_v1', 'the runtime role uploading a bundle is refused');
select throws_ok($$select count(*) from ql.bundle_chunks$$, '42501', 'permission denied for schema ql',
  'the runtime role reading a chunk outside the API is refused');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Upload: three chunks (256 KiB, 256 KiB, the rest), out of order, a repeat, a resumed upload, the seal.
select is(ql_api.bundle_stat_v1(:'d3'),
  jsonb_build_object('status', 'missing', 'digest', :'d3', 'sizeBytes', null, 'chunkCount', null, 'presentChunks', '[]'::jsonb),
  'stat: a bundle never uploaded is missing');
select is(pg_temp.put('three', 1),
  jsonb_build_object('status', 'stored', 'digest', :'d3', 'index', 1, 'sizeBytes', 600000, 'chunkCount', 3),
  'the first chunk stored (any index) creates the bundle');
select is((select (size_bytes, chunk_count, complete, entries is null)::text from ql.bundles where digest = :'d3'),
  '(600000,3,f,t)', 'the bundle is incomplete, 3 chunks of 600000 bytes, no entries yet');
select is(pg_temp.refused(format($$pg_temp.put('three', 1)$$)),
  format('{"index": 1, "digest": "%s", "status": "stored", "sizeBytes": 600000, "chunkCount": 3} and nothing changed', :'d3'),
  'the same chunk again answers the same and writes nothing');
select is(ql_api.bundle_stat_v1(:'d3'),
  jsonb_build_object('status', 'partial', 'digest', :'d3', 'sizeBytes', 600000, 'chunkCount', 3, 'presentChunks', '[1]'::jsonb),
  'stat: partial, with the chunks stored (the CLI resumes from there)');
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, '[]')$$, :'d3')),
  '{"detail": 0, "reason": "chunk", "status": "not_found"} and nothing changed',
  'sealing before every chunk is there: not_found chunk with the first missing index, nothing changes');
select is(pg_temp.put('three', 2) ->> 'status', 'stored', 'the last chunk (75712 bytes) is stored');
select is(pg_temp.put('three', 0) ->> 'status', 'stored', 'the first chunk is stored');
select is(ql_api.bundle_stat_v1(:'d3') -> 'presentChunks', '[0, 1, 2]', 'stat: every chunk present, still partial');
select is(ql_api.bundle_seal_v1(:'d3', '[{"path": "bin", "kind": "dir", "size": 0, "mode": 493},
                                         {"path": "bin/run.sh", "kind": "file", "size": 1200, "mode": 493}]'),
  jsonb_build_object('status', 'sealed', 'digest', :'d3', 'sizeBytes', 600000, 'chunkCount', 3, 'entryCount', 2),
  'the seal completes it');
select is(ql_api.bundle_stat_v1(:'d3') ->> 'status', 'stored', 'stat: stored (the CLI skips the upload)');
select is((select sha256(string_agg(c.data, ''::bytea order by c.idx)) from ql.bundle_chunks c where c.digest = :'d3'),
  sha256(pg_temp.data('three')), 'the stored chunks, in order, are the archive');
select is((select entries from ql.bundles where digest = :'d3'),
  '[{"path": "bin", "kind": "dir", "size": 0, "mode": 493}, {"path": "bin/run.sh", "kind": "file", "size": 1200, "mode": 493}]',
  'the bundle keeps the file list it was sealed with');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 600000, 0, %L::bytea)$$, :'d3', pg_temp.chunk('other', 0))),
  format('{"digest": "%s", "status": "already_stored", "sizeBytes": 600000, "chunkCount": 3} and nothing changed', :'d3'),
  'a chunk of a complete bundle answers already_stored and writes nothing');
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, '[]')$$, :'d3')),
  format('{"digest": "%s", "status": "already_stored", "sizeBytes": 600000, "chunkCount": 3} and nothing changed', :'d3'),
  'sealing a complete bundle again answers already_stored and keeps its file list');
select is(pg_temp.upload('one', '[]'),
  jsonb_build_object('status', 'sealed', 'digest', :'d1', 'sizeBytes', 20, 'chunkCount', 1, 'entryCount', 0),
  'a bundle of one 20-byte chunk, with an empty file list');

-- ---------------------------------------------------------------------------------------------
-- Refused chunks: nothing changes. The incomplete bundle 'other' has chunk 0 stored.
select is(pg_temp.put('other', 0) ->> 'status', 'stored', 'setup: another upload begins');
select is(pg_temp.refused($$ql_api.bundle_put_v1(null, 20, 0, '\x00'::bytea)$$),
  '{"reason": "digest", "status": "invalid"} and nothing changed', 'a NULL digest is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 20, 0, '\x00'::bytea)$$, upper(:'dnone'))),
  '{"reason": "digest", "status": "invalid"} and nothing changed', 'an upper-case digest is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 20, 0, '\x00'::bytea)$$, left(:'dnone', 63))),
  '{"reason": "digest", "status": "invalid"} and nothing changed', 'a digest of 63 characters is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 0, 0, '\x00'::bytea)$$, :'dnone')),
  '{"reason": "size_bytes", "status": "invalid"} and nothing changed', 'an empty bundle is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, null, 0, '\x00'::bytea)$$, :'dnone')),
  '{"reason": "size_bytes", "status": "invalid"} and nothing changed', 'a NULL size is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 600000, 0, %L::bytea)$$, :'dother', pg_temp.chunk('other', 0))),
  '{"reason": "size_bytes", "status": "invalid"} and nothing changed',
  'a size other than the stored upload''s is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 300000, -1, '\x00'::bytea)$$, :'dother')),
  '{"reason": "index", "status": "invalid"} and nothing changed', 'a negative index is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 300000, 2, '\x00'::bytea)$$, :'dother')),
  '{"reason": "index", "status": "invalid"} and nothing changed', 'an index past the last chunk is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 300000, 1, null)$$, :'dother')),
  '{"reason": "data", "status": "invalid"} and nothing changed', 'NULL data is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 300000, 1, %L::bytea)$$, :'dother',
                                 substr(pg_temp.chunk('other', 1), 2))),
  '{"reason": "data", "status": "invalid"} and nothing changed', 'a last chunk one byte short is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 600000, 0, %L::bytea)$$, :'dnone',
                                 substr(pg_temp.chunk('three', 0), 2))),
  '{"reason": "data", "status": "invalid"} and nothing changed',
  'a first chunk shorter than 256 KiB is invalid (and creates no bundle)');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 300000, 0, %L::bytea)$$, :'dother', pg_temp.chunk('three', 0))),
  '{"reason": "data", "status": "invalid"} and nothing changed', 'other bytes at a stored index are invalid');

-- The cap: 32 MiB by default, and a lowered one.
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 33554433, 0, %L::bytea)$$, :'dnone', pg_temp.chunk('three', 0))),
  '{"reason": "too_large", "status": "invalid"} and nothing changed', 'a bundle one byte above 32 MiB is too large');
select is(pg_temp.upload('max') ->> 'status', 'sealed', 'a bundle of exactly 32 MiB (128 chunks) is uploaded and sealed');
update ql.settings set bundle_max_bytes = 1048576;
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 1048577, 0, %L::bytea)$$, :'dnone', pg_temp.chunk('three', 0))),
  '{"reason": "too_large", "status": "invalid"} and nothing changed', 'with the cap lowered to 1 MiB, 1 MiB + 1 is too large');
select is(pg_temp.refused(format($$ql_api.bundle_put_v1(%L, 33554432, 5, %L::bytea)$$, :'dmax', pg_temp.chunk('max', 5))),
  format('{"digest": "%s", "status": "already_stored", "sizeBytes": 33554432, "chunkCount": 128} and nothing changed', :'dmax'),
  'a bundle stored before the cap was lowered stays stored');
select is(ql_api.bundle_stat_v1(:'dmax') ->> 'status', 'stored', '... and is reported stored');
update ql.settings set bundle_max_bytes = default;

-- Refused seals: nothing changes.
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, '[]')$$, left(:'dnone', 10))),
  '{"reason": "digest", "status": "invalid"} and nothing changed', 'sealing a malformed digest is invalid');
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, '[]')$$, :'dnone')),
  '{"reason": "bundle", "status": "not_found"} and nothing changed', 'sealing a bundle never uploaded is not_found');
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, null)$$, :'dother')),
  '{"reason": "entries", "status": "invalid"} and nothing changed', 'NULL entries are invalid');
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, '{"path": "a"}')$$, :'dother')),
  '{"reason": "entries", "status": "invalid"} and nothing changed', 'entries that are not an array are invalid');
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, %L)$$, :'dother',
            (select jsonb_agg(jsonb_build_object('path', 'f' || i, 'kind', 'file', 'size', 1, 'mode', 420))
               from generate_series(1, 10001) i))),
  '{"reason": "entries", "status": "invalid"} and nothing changed', 'more than 10,000 entries are invalid');
select is(pg_temp.refused(format($$ql_api.bundle_seal_v1(%L, %L)$$, :'dother', bad.e)),
  '{"reason": "entries", "status": "invalid"} and nothing changed', 'an invalid entry: ' || bad.why)
  from (values
    ('[{"path": "/etc/passwd", "kind": "file", "size": 1, "mode": 420}]'::jsonb, 'an absolute path'),
    ('[{"path": "a/../../b", "kind": "file", "size": 1, "mode": 420}]', 'a path with ..'),
    ('[{"path": "a//b", "kind": "file", "size": 1, "mode": 420}]', 'an empty segment'),
    ('[{"path": "a\u0007b", "kind": "file", "size": 1, "mode": 420}]', 'a control character'),
    ('[{"path": "a", "kind": "symlink", "size": 1, "mode": 420}]', 'a kind other than file or dir'),
    ('[{"path": "a", "kind": "file", "size": 1.5, "mode": 420}]', 'a fractional size'),
    ('[{"path": "a", "kind": "file", "size": 1, "mode": 4096}]', 'a mode above 07777'),
    ('[{"path": "a", "kind": "file", "size": 1}]', 'a missing key'),
    ('[{"path": "a", "kind": "file", "size": 1, "mode": 420, "uid": 0}]', 'an extra key'),
    ('[{"path": "a", "kind": "file", "size": 1, "mode": 420}, {"path": "a", "kind": "dir", "size": 0, "mode": 493}]',
     'a path twice'),
    ('["a"]', 'an entry that is not an object')) as bad (e, why);
select is(ql_api.bundle_stat_v1(:'dother') -> 'presentChunks', '[0]', 'the refused seals left the upload as it was');

-- A wrong digest: chunks of the right lengths that do not hash to it. The upload is deleted.
select is(ql_api.bundle_put_v1(:'dnone', 262145, 0, pg_temp.chunk('wrong', 0)) ->> 'status', 'stored',
  'setup: chunk 0 of an archive uploaded under another digest');
select is(ql_api.bundle_put_v1(:'dnone', 262145, 1, pg_temp.chunk('wrong', 1)) ->> 'status', 'stored', '... and chunk 1');
select is(ql_api.bundle_seal_v1(:'dnone', '[]'), '{"status": "invalid", "reason": "digest"}',
  'a seal whose chunks do not hash to the digest is invalid digest');
select is(ql_api.bundle_stat_v1(:'dnone') ->> 'status', 'missing', 'the upload is deleted, to start again');
select is((select count(*) from ql.bundle_chunks where digest = :'dnone'), 0::bigint, 'with its chunks');

-- ---------------------------------------------------------------------------------------------
-- Fetch: a Run whose plan names bundle 'three'.
select pg_temp.mk_project('bundle-p') as p \gset
select 'bundle-pool-' || substr(md5(random()::text), 1, 8) as pool \gset
select ql_api.task_create_v1(:'p', 'unpacks', jsonb_build_object('argv', '["sh", "bin/run.sh"]'::jsonb, 'pool', :'pool',
                                                                   'bundle', :'d3')) ->> 'revisionId' as rev \gset
select ql_api.task_create_v1(:'p', 'plain', jsonb_build_object('argv', '["true"]'::jsonb, 'pool', :'pool' || '-plain'))
  ->> 'revisionId' as rev_plain \gset
select pg_temp.mk_run(:'rev') as run1 \gset
select pg_temp.mk_worker(:'pool') as w \gset
set local role ql_runtime;
select pg_temp.offer_at(:'w', 'claimed') as o \gset
select pg_temp.fetch(:'o', :'d3', 0) as c0 \gset
select pg_temp.fetch(:'o', :'d3', 0) as c0_again \gset
reset role;
select is(:'o'::jsonb -> 'plan' ->> 'bundle', :'d3', 'setup: the offer''s plan names the bundle');
select is(:'c0'::jsonb - 'data',
  jsonb_build_object('status', 'chunk', 'digest', :'d3', 'index', 0, 'chunkCount', 3, 'sizeBytes', 600000),
  'a claimed Attempt fetches chunk 0, with the bundle''s shape');
select is(decode(:'c0'::jsonb ->> 'data', 'base64'), pg_temp.chunk('three', 0), 'the chunk''s bytes, in base64');
select ok(strpos(:'c0'::jsonb ->> 'data', E'\n') = 0 and length(:'c0'::jsonb ->> 'data') = 349528,
  'on one line: 349528 characters of base64 for 256 KiB');
select is(:'c0_again'::jsonb, :'c0'::jsonb, 'the same fetch again (a lost answer) gets the same bytes');
set local role ql_runtime;
select pg_temp.activate('starting', :'w', (:'o'::jsonb ->> 'sessionId')::uuid, :'o') ->> 'status' as started \gset
select pg_temp.fetch(:'o', :'d3', 1) as c1, pg_temp.fetch(:'o', :'d3', 2) as c2 \gset
select pg_temp.activate('running', :'w', (:'o'::jsonb ->> 'sessionId')::uuid, :'o') ->> 'status' as running \gset
select pg_temp.fetch(:'o', :'d3', 2) as c2_running \gset
reset role;
select is(:'started' || ' ' || :'running', 'applied applied', 'setup: the Attempt starts, then runs');
select is(sha256(decode(:'c0'::jsonb ->> 'data', 'base64') || decode(:'c1'::jsonb ->> 'data', 'base64')
                 || decode(:'c2'::jsonb ->> 'data', 'base64')), decode(:'d3', 'hex'),
  'a starting Attempt fetches the rest: the three chunks, in order, hash to the digest');
select is(octet_length(decode(:'c2'::jsonb ->> 'data', 'base64')), 75712, 'the last chunk is the rest (75712 bytes)');
select is(:'c2_running'::jsonb, :'c2'::jsonb, 'a running Attempt fetches too, the same bytes');

set local role ql_runtime;
select pg_temp.fetch(:'o', :'d3', 3) as past_end, pg_temp.fetch(:'o', :'d3', -1) as negative,
       pg_temp.fetch(:'o', :'d1', 0) as not_named, pg_temp.fetch(:'o', :'dnone', 0) as never_stored,
       pg_temp.fetch(:'o', upper(:'d3'), 0) as upper_digest, pg_temp.fetch(:'o', :'d3', 0, 'token-b') as wrong_token,
       pg_temp.fetch(:'o' || jsonb_build_object('offerId', gen_random_uuid()), :'d3', 0) as other_offer \gset
reset role;
select is(:'past_end'::jsonb, '{"status": "invalid", "reason": "index"}', 'an index past the last chunk is invalid');
select is(:'negative'::jsonb, '{"status": "invalid", "reason": "index"}', 'a negative index is invalid');
select is(:'not_named'::jsonb, '{"status": "not_found", "reason": "bundle"}',
  'a stored bundle the plan does not name is not_found');
select is(:'never_stored'::jsonb, :'not_named'::jsonb, '... exactly as a digest never stored: nothing is learnt');
select is(:'upper_digest'::jsonb, '{"status": "invalid", "reason": "digest"}', 'a malformed digest is invalid');
select is(:'wrong_token'::jsonb, '{"status": "fenced", "reason": "token_mismatch"}',
  'a fetch under another token (a stale Lease holder) is fenced');
select is(:'other_offer'::jsonb, '{"status": "fenced", "reason": "identity_mismatch"}',
  'a fetch naming another offer beside the Attempt''s id is fenced identity_mismatch');

-- Nothing a fetch did changed a row (the starting and running ACKs did, so compare after them).
select pg_temp.bstate() as after_acks \gset
set local role ql_runtime;
select pg_temp.fetch(:'o', :'d3', 0) is not null as ok1, pg_temp.fetch(:'o', :'d1', 0) is not null as ok2,
       pg_temp.fetch(:'o', :'d3', 9) is not null as ok3 \gset
reset role;
select is(pg_temp.bstate(), :'after_acks', 'fetches, answered or refused, write nothing');

-- An ended Attempt and an expired Lease get nothing.
set local role ql_runtime;
select pg_temp.complete(:'w', (:'o'::jsonb ->> 'sessionId')::uuid, :'o', 1, 0) ->> 'status' as done \gset
select pg_temp.fetch(:'o', :'d3', 0) as after_end \gset
reset role;
select is(:'done'::text, 'completed', 'setup: the Attempt completes');
select is(:'after_end'::jsonb, '{"status": "fenced", "reason": "state_drift"}', 'an ended Attempt fetches nothing');
select pg_temp.mk_run(:'rev') as run2 \gset
set local role ql_runtime;
select pg_temp.offer_at(:'w', 'running') as o2 \gset
reset role;
select pg_temp.age_attempt(:'o2', 3600000) \gset
set local role ql_runtime;
select pg_temp.fetch(:'o2', :'d3', 0) as expired \gset
reset role;
select is(:'expired'::jsonb, '{"status": "fenced", "reason": "lease_expired"}', 'an Attempt whose Lease expired fetches nothing');

-- A plan without a bundle: every digest is not_found.
select pg_temp.mk_run(:'rev_plain') as run3 \gset
select pg_temp.mk_worker(:'pool' || '-plain') as w3 \gset
set local role ql_runtime;
select pg_temp.offer_at(:'w3', 'starting') as o3 \gset
select pg_temp.fetch(:'o3', :'d3', 0) as plain_fetch \gset
reset role;
select is(:'plain_fetch'::jsonb, '{"status": "not_found", "reason": "bundle"}',
  'an Attempt whose plan names no bundle fetches none, another task''s included');

-- ---------------------------------------------------------------------------------------------
-- The revision view (task show).
select ql_api.task_revision_view_v1(:'rev') as view \gset
select is(array(select k from jsonb_object_keys(:'view'::jsonb) k order by k),
  array['bundle', 'createdAtMs', 'plan', 'planSignature', 'projectId', 'revisionId', 'status', 'taskId'],
  'the view answers exactly the documented keys');
select is(:'view'::jsonb - 'createdAtMs' - 'taskId',
  jsonb_build_object('status', 'found', 'revisionId', :'rev', 'projectId', :'p',
    'plan', jsonb_build_object('argv', '["sh", "bin/run.sh"]'::jsonb, 'pool', :'pool', 'bundle', :'d3'),
    'planSignature', null,
    'bundle', jsonb_build_object('digest', :'d3', 'sizeBytes', 600000, 'chunkCount', 3, 'entries',
      '[{"path": "bin", "kind": "dir", "size": 0, "mode": 493},
        {"path": "bin/run.sh", "kind": "file", "size": 1200, "mode": 493}]'::jsonb)),
  'a revision whose plan names a bundle: the plan, no signature, the bundle and its file list');
select is(ql_api.task_revision_view_v1(:'rev_plain') -> 'bundle', 'null', 'a plan without a bundle shows bundle null');
select is(ql_api.task_revision_view_v1(null), '{"status": "invalid", "reason": "revision_id"}', 'no revision id is invalid');
select is(ql_api.task_revision_view_v1(gen_random_uuid()), '{"status": "not_found", "reason": "revision"}',
  'an unknown revision is not_found');

-- ---------------------------------------------------------------------------------------------
-- Retention: bundles no revision names leave a day after their upload began; named ones stay.
-- 'three' is named by a current revision, 'one' by an old revision only, 'max' by none, 'other' is an upload in
-- progress; a fresh unnamed bundle stays until it is a day old.
select ql_api.task_create_v1(:'p', 'old-one', jsonb_build_object('argv', '["true"]'::jsonb, 'bundle', :'d1')) ->> 'status'
  as old_one \gset
select ql_api.task_create_v1(:'p', 'old-one', '{"argv": ["true"]}') ->> 'status' as old_one_revised \gset
select is(:'old_one' || ' ' || :'old_one_revised', 'created revised', 'setup: bundle one is named by an earlier revision only');
select pg_temp.mk_blob('fresh', 10, 6) as dfresh \gset
select is(pg_temp.upload('fresh') ->> 'status', 'sealed', 'setup: a fresh bundle no revision names');
update ql.bundles set created_at_ms = created_at_ms - 2 * 86400000 where digest in (:'d3', :'d1', :'dmax', :'dother');
select pg_temp.state() as runs_before \gset
select is(pg_temp.prune(1) -> 'bundles', '1', 'a page of 1 deletes one old unnamed bundle');
select is(pg_temp.prune(10) -> 'bundles', '1', 'the next page deletes the other');
select is(pg_temp.prune(10) -> 'bundles', '0', 'then none is left to delete');
select is(array(select b.digest from ql.bundles b order by b.digest),
  array(select d from unnest(array[:'d3', :'d1', :'dfresh']) d order by d),
  'the bundles revisions name (current or not) and the fresh one stay; the old unnamed one and the stale upload go');
select is((select count(*) from ql.bundle_chunks c where c.digest in (:'dmax', :'dother')), 0::bigint,
  'their chunks went with them');
select is(pg_temp.state(), :'runs_before', 'pruning bundles touched no Run, Attempt, Lease, offer, event or session');
set local enable_seqscan = off;
select ok(pg_temp.plan_of(format($$select b.digest from ql.bundles b where not exists (select 1 from
            ql.task_execution_revisions r where r.plan_json ? 'bundle' and r.plan_json ->> 'bundle' = b.digest)$$))
          like '%task_execution_revisions_bundle_idx%',
  'whether a revision names a bundle is answered by task_execution_revisions_bundle_idx, not by reading every revision');
reset enable_seqscan;

select * from finish();
rollback;
