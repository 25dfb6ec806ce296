-- Tests ql_api.artifact_upload_v1: stored receipts, exact replay (also after completion), the content checks and every fence.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(123);

-- Everything pg_temp.state() holds except artifacts: what an upload must leave alone.
create function pg_temp.state_but_artifacts() returns text language sql
return (select string_agg(l, E'\n' order by n) from regexp_split_to_table(pg_temp.state(), E'\n') with ordinality t(l, n)
         where l !~ '^artifact ');

-- The exact stored answer for one artifact row.
create function pg_temp.receipt_of(p_attempt uuid, p_kind text) returns jsonb language sql
return (select jsonb_build_object('status', 'stored', 'receipt', jsonb_build_object(
          'artifactId', x.id, 'kind', x.kind, 'sha256', encode(x.sha256, 'hex'), 'size', x.size))
          from ql.artifacts x where x.attempt_id = p_attempt and x.kind = p_kind);

select pg_temp.digest('token-a') as d, pg_temp.digest('token-b') as d_b,
       encode(pg_temp.digest('token-a'), 'hex') as d_hex,
       encode(convert_to('token-a', 'UTF8'), 'hex') as tok_hex \gset

-- ---------------------------------------------------------------------------------------------
-- Structure: the one wire command, SECURITY DEFINER, EXECUTE for the runtime role only.
select has_function('ql_api', 'artifact_upload_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bytea', 'integer', 'bytea'], 'artifact upload exists with its typed parameters');
select is_definer('ql_api', 'artifact_upload_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bytea', 'integer', 'bytea'], 'artifact upload is SECURITY DEFINER');
select function_returns('ql_api', 'artifact_upload_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bytea', 'integer', 'bytea'], 'jsonb', 'artifact upload answers a jsonb result');
select is((select p.proconfig from pg_proc p
            where p.oid = 'ql_api.artifact_upload_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bytea, integer, bytea)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'artifact upload pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'artifact_upload_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bytea', 'integer', 'bytea'], 'ql_runtime', array['EXECUTE'], 'the runtime role may execute artifact upload');
select function_privs_are('ql_api', 'artifact_upload_v1', array['uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'bytea', 'integer', 'bytea'], 'public', array[]::text[], 'PUBLIC may not execute artifact upload');
set local role ql_runtime;
select throws_ok($$select count(*) from ql.artifacts$$, '42501', 'permission denied for schema ql',
  'the runtime role cannot read or write artifacts outside the API');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Scenario A: a running Attempt stores its log and result; exact replay; conflicting content.
select pg_temp.mk_scenario() as a_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'a_w', 'running') o \gset a_
reset role;
select pg_temp.state_but_artifacts() as rest, ql.now_ms() as t0 \gset
set local role ql_runtime;
select pg_temp.upload(:'a_w', :'a_s', :'a_o', 'log', 'hello'::bytea) as res_log \gset
reset role;
select ql.now_ms() as t1 \gset
select is(:'res_log'::jsonb, pg_temp.receipt_of(:'a_a', 'log'),
  'a stored log answers its receipt: the stored id, kind, SHA-256 hex and size');
select results_eq(format($$select x.kind, encode(x.sha256, 'hex'), x.size, x.content from ql.artifacts x
                            where x.attempt_id = %L order by x.kind$$, :'a_a'),
  $$values ('log'::text, encode(sha256('hello'::bytea), 'hex'), 5, 'hello'::bytea)$$,
  'the artifact row holds the content, its SHA-256 and its size');
select ok((select x.created_at_ms between :t0 and :t1 from ql.artifacts x where x.attempt_id = :'a_a'),
  'the artifact is stamped with database time');
select is(pg_temp.state_but_artifacts(), :'rest', 'an upload changes no Run, Attempt, Lease, offer, event or session');
select ok(:'res_log'::jsonb::text !~ :'d_hex' and :'res_log'::jsonb::text !~ 'token-a' and :'res_log'::jsonb::text !~ :'tok_hex',
  'the receipt never carries the token or its digest');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.upload(:'a_w', :'a_s', :'a_o', 'log', 'hello'::bytea), :'res_log'::jsonb,
  'an exact replay answers the same receipt');
reset role;
select is(pg_temp.state(), :'before', 'exact replay stores nothing new and nothing changes');
set local role ql_runtime;
select pg_temp.upload(:'a_w', :'a_s', :'a_o', 'result', ''::bytea) as res_r \gset
reset role;
select is(:'res_r'::jsonb, pg_temp.receipt_of(:'a_a', 'result'), 'an empty result is stored with its receipt');
select is((:'res_r'::jsonb -> 'receipt') - 'artifactId',
  jsonb_build_object('kind', 'result', 'sha256', encode(sha256(''::bytea), 'hex'), 'size', 0),
  'the empty result''s receipt is the SHA-256 of nothing and size 0');
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.upload(:'a_w', :'a_s', :'a_o', 'log', 'other'::bytea),
  '{"status": "fenced", "reason": "artifact_conflict"}', 'a different log for the same Attempt is fenced artifact_conflict');
reset role;
select is(pg_temp.state(), :'before', 'conflicting log is fenced and nothing changes');
set local role ql_runtime;
select is(pg_temp.upload(:'a_w', :'a_s', :'a_o', 'result', 'x'::bytea),
  '{"status": "fenced", "reason": "artifact_conflict"}', 'a different result for the same Attempt is fenced artifact_conflict');
reset role;
select is(pg_temp.state(), :'before', 'conflicting result is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- Scenario B: a running Attempt with nothing stored. Every call below would otherwise store its log.
select pg_temp.mk_scenario() as b_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'b_w', 'running') o \gset b_
reset role;
select pg_temp.mk_run(r.task_revision_id) as b_r2 from ql.runs r where r.id = :'b_r' \gset
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', null, sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "kind"}', 'a NULL kind is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL kind is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'stdout', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "kind"}', 'a kind other than log or result is invalid');
reset role;
select is(pg_temp.state(), :'before', 'unknown kind is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'LOG', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "kind"}', 'kinds are exact: LOG is invalid');
reset role;
select is(pg_temp.state(), :'before', 'upper-case kind is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', null, 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "sha256"}', 'a NULL SHA-256 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL SHA-256 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', substring(sha256('hello'::bytea) from 1 for 31), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "sha256"}', 'a 31-byte SHA-256 is invalid');
reset role;
select is(pg_temp.state(), :'before', '31-byte SHA-256 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', (sha256('hello'::bytea) || '\x00'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "sha256"}', 'a 33-byte SHA-256 is invalid');
reset role;
select is(pg_temp.state(), :'before', '33-byte SHA-256 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), null, 'hello'::bytea),
  '{"status": "invalid", "reason": "size"}', 'a NULL size is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL size is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, null),
  '{"status": "invalid", "reason": "size"}', 'NULL content is invalid (size)');
reset role;
select is(pg_temp.state(), :'before', 'NULL content is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 6, 'hello'::bytea),
  '{"status": "invalid", "reason": "size"}', 'a size larger than the content is invalid');
reset role;
select is(pg_temp.state(), :'before', 'size mismatch is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 4, 'hello'::bytea),
  '{"status": "invalid", "reason": "size"}', 'a size smaller than the content is invalid');
reset role;
select is(pg_temp.state(), :'before', 'short size is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256(''::bytea), -1, ''::bytea),
  '{"status": "invalid", "reason": "size"}', 'a negative size is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative size is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hellO'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "sha256_mismatch"}', 'content that does not hash to the declared SHA-256 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'SHA-256 mismatch is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(null, :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "worker_id"}', 'a NULL worker id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL worker id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', null, 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "session_id"}', 'a NULL session id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL session id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', null, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}', 'a NULL worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL worker generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 0, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}', 'worker generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', -1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}', 'a negative worker generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative worker generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 9007199254740992, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "worker_generation"}', 'a worker generation above 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'worker generation above 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, null, :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "project_id"}', 'a NULL project id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL project id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', null, :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "run_id"}', 'a NULL run id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL run id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', null, :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "attempt_id"}', 'a NULL attempt id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL attempt id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', null, 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "offer_id"}', 'a NULL offer id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL offer id is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', null, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "lease_generation"}', 'a NULL lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL lease generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 0, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "lease_generation"}', 'lease generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation 0 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', -1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "lease_generation"}', 'a negative lease generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'negative lease generation is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 9007199254740992, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "lease_generation"}', 'a lease generation above 2^53-1 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'lease generation above 2^53-1 is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, null, 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "token_digest"}', 'a NULL token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', 'NULL token digest is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, substring(:'d'::bytea from 1 for 31), 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "token_digest"}', 'a 31-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', '31-byte token digest is invalid and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, (:'d'::bytea || '\x00'::bytea), 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "token_digest"}', 'a 33-byte token digest is invalid');
reset role;
select is(pg_temp.state(), :'before', '33-byte token digest is invalid and nothing changes');

-- not_found, identity and liveness fences (scenario A is the other Worker).
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', gen_random_uuid(), 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'an unknown offer beside the Attempt''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'unknown offer is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'a_w', :'a_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "not_found", "reason": "offer"}', 'another Worker''s offer does not exist for this Worker');
reset role;
select is(pg_temp.state(), :'before', 'offer of another Worker is not_found and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'a_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'another Project''s id is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Project''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r2', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "identity_mismatch"}', 'another Run of the same Project is fenced identity_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'another Run''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'a_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "not_found", "reason": "offer"}', 'another Worker''s Attempt named under this offer is not_found: it does not exist for this one');
reset role;
select is(pg_temp.state(), :'before', 'another Attempt''s id is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', gen_random_uuid(), 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "stale_session"}', 'an unknown session is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'unknown session is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'a_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "stale_session"}', 'another Worker''s live session is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'another Worker''s session is fenced and nothing changes');
set local role ql_runtime;
select pg_temp.open_session(:'b_w') as b_s_new \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "stale_session"}', 'a session replaced by a newer open is fenced stale_session');
reset role;
select is(pg_temp.state(), :'before', 'replaced session is fenced and nothing changes');
\set b_s :b_s_new
update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1 where id = :'b_s';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "session_expired"}', 'a live session past its expiry is fenced session_expired');
reset role;
select is(pg_temp.state(), :'before', 'expired session is fenced and nothing changes');
update ql.worker_sessions set expires_at_ms = ql.now_ms() + 120000 where id = :'b_s';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 2, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "stale_generation"}', 'a worker generation other than the session''s is fenced stale_generation');
reset role;
select is(pg_temp.state(), :'before', 'wrong worker generation is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 2, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "stale_lease_generation"}', 'another lease generation is fenced stale_lease_generation');
reset role;
select is(pg_temp.state(), :'before', 'wrong lease generation is fenced and nothing changes');
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d_b', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "fenced", "reason": "token_mismatch"}', 'another token''s digest is fenced token_mismatch');
reset role;
select is(pg_temp.state(), :'before', 'wrong token is fenced and nothing changes');

-- The size cap: ql.settings.artifact_max_bytes.
update ql.settings set artifact_max_bytes = 4;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.artifact_upload_v1(:'b_w', :'b_s', 1, :'b_p', :'b_r', :'b_a', :'b_oid', 1, :'d', 'log', sha256('hello'::bytea), 5, 'hello'::bytea),
  '{"status": "invalid", "reason": "too_large"}', 'content above artifact_max_bytes is invalid too_large');
reset role;
select is(pg_temp.state(), :'before', 'too large content is invalid and nothing changes');
set local role ql_runtime;
select pg_temp.upload(:'b_w', :'b_s', :'b_o', 'log', 'hell'::bytea) as res \gset
reset role;
select is(:'res'::jsonb, pg_temp.receipt_of(:'b_a', 'log'), 'content of exactly artifact_max_bytes is stored');
update ql.settings set artifact_max_bytes = 1048576;

-- Expired Lease: a new artifact is fenced, the stored one still replays.
select pg_temp.age_attempt(:'b_o', 120000) \gset
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.upload(:'b_w', :'b_s', :'b_o', 'result', 'late'::bytea),
  '{"status": "fenced", "reason": "lease_expired"}', 'a new artifact after the Lease expired is fenced lease_expired');
reset role;
select is(pg_temp.state(), :'before', 'upload after Lease expiry is fenced and nothing changes');
set local role ql_runtime;
select is(pg_temp.upload(:'b_w', :'b_s', :'b_o', 'log', 'hell'::bytea),
  :'res'::jsonb, 'an exact replay after the Lease expired still answers the same receipt');
reset role;
select is(pg_temp.state(), :'before', 'replay after Lease expiry is answered and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- State drift: a claimed Attempt has not passed the start barrier; a lost one is no longer this Worker's.
select pg_temp.mk_scenario() as c_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'c_w', 'claimed') o \gset c_
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.upload(:'c_w', :'c_s', :'c_o', 'log', 'hello'::bytea),
  '{"status": "fenced", "reason": "state_drift"}', 'a claimed Attempt (before the starting ACK) is fenced state_drift');
reset role;
select is(pg_temp.state(), :'before', 'upload to a claimed Attempt is fenced and nothing changes');
select pg_temp.mk_scenario() as e_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'e_w', 'running') o \gset e_
reset role;
update ql.run_attempts set status = 'lost', ended_at_ms = ql.now_ms() where id = :'e_a';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.upload(:'e_w', :'e_s', :'e_o', 'log', 'hello'::bytea),
  '{"status": "fenced", "reason": "state_drift"}', 'a lost Attempt is fenced state_drift');
reset role;
select is(pg_temp.state(), :'before', 'upload to a lost Attempt is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- After completion: replays still answer their receipts; new or different content is refused.
set local role ql_runtime;
select is(pg_temp.complete(:'a_w', :'a_s', :'a_o', 1, 0, null,
            jsonb_build_array((:'res_log'::jsonb -> 'receipt') - 'kind', (:'res_r'::jsonb -> 'receipt') - 'kind')) ->> 'status',
  'completed', 'setup: scenario A completes with both receipts');
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.upload(:'a_w', :'a_s', :'a_o', 'log', 'hello'::bytea),
  :'res_log'::jsonb, 'an exact replay after completion answers the same receipt');
reset role;
select is(pg_temp.state(), :'before', 'replay after completion is answered and nothing changes');
set local role ql_runtime;
select is(pg_temp.upload(:'a_w', :'a_s', :'a_o', 'log', 'other'::bytea),
  '{"status": "fenced", "reason": "artifact_conflict"}', 'different content after completion is fenced artifact_conflict');
reset role;
select is(pg_temp.state(), :'before', 'conflict after completion is fenced and nothing changes');
select pg_temp.mk_scenario() as f_w \gset
set local role ql_runtime;
select o, o ->> 'sessionId' as s, o ->> 'projectId' as p, o ->> 'runId' as r, o ->> 'attemptId' as a,
       o ->> 'offerId' as oid
  from pg_temp.offer_at(:'f_w', 'running') o \gset f_
reset role;
set local role ql_runtime;
select is(pg_temp.complete(:'f_w', :'f_s', :'f_o', 1, 0) ->> 'status', 'completed', 'setup: scenario F completes without artifacts');
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.upload(:'f_w', :'f_s', :'f_o', 'log', 'hello'::bytea),
  '{"status": "fenced", "reason": "state_drift"}', 'a first artifact after the Attempt ended is fenced state_drift');
reset role;
select is(pg_temp.state(), :'before', 'upload to an ended Attempt is fenced and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- No raw token anywhere in the database.
select ok(pg_temp.state() !~ 'token-a' and pg_temp.state() !~ :'tok_hex', 'the raw token (text or bytes) is nowhere in the stored rows');
select ok(pg_temp.state() !~ 'token-b' and pg_temp.state() !~ encode(convert_to('token-b', 'UTF8'), 'hex'),
  'a rejected token leaves no trace either');

select * from finish();
rollback;
