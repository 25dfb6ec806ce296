-- Tests ql_api.subject_create_v1: a subject is created by the SHA-256 of its bearer token (the token itself is
-- never stored), a digest already in use is fenced token_in_use, a name already in use name_taken (names are
-- unique and exact; the digest is checked first), invalid kind/name/digest change nothing, the
-- digest of the empty token (what the shell admits a request without a bearer token with) is refused
-- empty_token and writes nothing, and no runtime or scheduler role may register a subject (operators call it
-- as a DBA, through the CLI).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(81);

-- Everything the control plane stores: runs, attempts, …, projects, subjects, bindings, tasks, revisions, workers.
create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('project ' || p::text, E'\n' order by p.id) from ql.projects p),
  (select string_agg('subject ' || s::text, E'\n' order by s.id) from ql.subjects s),
  (select string_agg('binding ' || b::text, E'\n' order by b.project_id, b.subject_id) from ql.role_bindings b),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('revision ' || r::text, E'\n' order by r.id) from ql.task_execution_revisions r),
  (select string_agg('worker ' || w::text, E'\n' order by w.id) from ql.workers w));
-- The admission audit and the idempotent mutations (append-only; not in ostate).
create function pg_temp.astate() returns text language sql
return concat_ws(E'\n',
  (select string_agg('audit ' || a::text, E'\n' order by a::text) from ql.security_audit a),
  (select string_agg('mutation ' || m::text, E'\n' order by m::text) from ql.mutations m));

-- ---------------------------------------------------------------------------------------------
-- Structure: an operator's command, SECURITY DEFINER, executable by its owner only.
select has_function('ql_api', 'subject_create_v1', array['text', 'text', 'bytea'],
  'subject_create_v1(kind, name, token digest) exists');
select is_definer('ql_api', 'subject_create_v1', array['text', 'text', 'bytea'],
  'subject_create_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'subject_create_v1', array['text', 'text', 'bytea'], 'jsonb',
  'subject_create_v1 answers a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p
            where p.oid = 'ql_api.subject_create_v1(text, text, bytea)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'subject_create_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'subject_create_v1', array['text', 'text', 'bytea'], 'ql_owner', array['EXECUTE'],
  'only its owner ql_owner (an operator acting as DBA) may register a subject');
select function_privs_are('ql_api', 'subject_create_v1', array['text', 'text', 'bytea'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not register a subject');
select function_privs_are('ql_api', 'subject_create_v1', array['text', 'text', 'bytea'], 'ql_scheduler', array[]::text[],
  'the scheduler role may not register a subject');
select function_privs_are('ql_api', 'subject_create_v1', array['text', 'text', 'bytea'], 'public', array[]::text[],
  'PUBLIC may not register a subject');

-- A queued Run so the stored state is never empty.
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project('sc-seed'))) as seed_run \gset

select pg_temp.ostate() as before \gset
set local role ql_runtime;
select throws_ok($$select ql_api.subject_create_v1('user', 'mallory', sha256('x'::bytea))$$, '42501',
  'permission denied for function subject_create_v1',
  'the runtime role calling subject_create_v1 is refused: 42501 (the shell cannot mint subjects)');
reset role;
set local role ql_scheduler;
select throws_ok($$select ql_api.subject_create_v1('system', 'cron', sha256('y'::bytea))$$, '42501',
  'permission denied for function subject_create_v1', 'the scheduler role calling subject_create_v1 is refused: 42501');
reset role;
select is(pg_temp.ostate(), :'before', 'the refused calls register nobody and change nothing');

-- ---------------------------------------------------------------------------------------------
-- 1. created: the subject is stored with the digest it was given, active.
select ql.now_ms() as t0 \gset
select ql_api.subject_create_v1('user', 'alice', pg_temp.digest('raw-token-of-alice-3f9a')) as created \gset
select ql.now_ms() as t1 \gset
select :'created'::jsonb ->> 'subjectId' as alice \gset

select is(array(select k from jsonb_object_keys(:'created'::jsonb) k order by k), array['status', 'subjectId'],
  'created answers exactly status and subjectId');
select is(:'created'::jsonb, jsonb_build_object('status', 'created', 'subjectId', :'alice'::uuid),
  'a new subject is created with its stored id');
select results_eq(
  format('select s.kind, s.name, s.token_digest::bytea, s.status from ql.subjects s where s.id = %L', :'alice'),
  $$values ('user'::text, 'alice'::text, sha256(convert_to('raw-token-of-alice-3f9a', 'UTF8')), 'active'::text)$$,
  'the subject is stored as a user named alice, active, with exactly the SHA-256 it was given');
select ok((select s.created_at_ms between :t0 and :t1 from ql.subjects s where s.id = :'alice'),
  'the subject is stamped with database time read during the call');
select is((select count(*)::int from ql.role_bindings b where b.subject_id = :'alice'), 0,
  'a new subject has no role binding (it sees no Project until one is set)');

-- The token never reaches the database: no stored row holds it, as text or as bytes.
select is((select count(*)::int from ql.subjects s
            where s::text like '%raw-token-of-alice-3f9a%'
               or position(convert_to('raw-token-of-alice-3f9a', 'UTF8') in s.token_digest) > 0), 0,
  'no subject row holds the raw token, as text or as bytes: only its digest is stored');
select is(position('raw-token-of-alice-3f9a' in pg_temp.ostate()), 0,
  'nothing the control plane stores holds the raw token');
select is(array(select a.attname::text from pg_catalog.pg_attribute a
                 where a.attrelid = 'ql.subjects'::regclass and a.attnum > 0 and not a.attisdropped order by a.attnum),
  array['id', 'kind', 'name', 'token_digest', 'status', 'created_at_ms'],
  'ql.subjects has no column a raw token could be kept in');

-- Every kind a subject may be.
select is(ql_api.subject_create_v1('agent', 'robot', pg_temp.digest('tok-robot')) ->> 'status', 'created',
  'an agent is created');
select is(ql_api.subject_create_v1('system', 'control-plane', pg_temp.digest('tok-system')) ->> 'status', 'created',
  'a system subject is created');
select results_eq(
  $$select s.kind, s.name from ql.subjects s where s.token_digest in (sha256(convert_to('tok-robot', 'UTF8')),
      sha256(convert_to('tok-system', 'UTF8'))) order by s.kind$$,
  $$values ('agent'::text, 'robot'::text), ('system'::text, 'control-plane'::text)$$,
  'the agent and the system subject are stored with their kinds');

-- Names are unique (ql/unique_names), and exact.
select pg_temp.ostate() as before \gset
select is(ql_api.subject_create_v1('user', 'alice', pg_temp.digest('another-alice')),
  '{"status": "fenced", "reason": "name_taken"}', 'a second subject of the same name is fenced name_taken');
select is(ql_api.subject_create_v1('agent', 'alice', pg_temp.digest('another-alice')),
  '{"status": "fenced", "reason": "name_taken"}', 'whatever its kind');
select is(pg_temp.ostate(), :'before', 'name_taken registers nothing and changes nothing');
select is((select count(*)::int from ql.subjects s where s.name = 'alice'), 1, 'one subject is named alice');
select is(ql_api.subject_create_v1('user', 'Alice', pg_temp.digest('capital-alice')) ->> 'status', 'created',
  'names are exact: Alice is another name');
select throws_ok($$insert into ql.subjects (kind, name, token_digest) values ('user', 'alice', sha256('direct'::bytea))$$,
  '23505', null, 'the table itself refuses a second alice (subjects_name_key), whoever writes it');

-- Boundaries of the name: 1 and 200 characters, any characters.
select is(ql_api.subject_create_v1('user', 'z', pg_temp.digest('tok-z')) ->> 'status', 'created',
  'a one-character name is created');
select is(ql_api.subject_create_v1('user', repeat('n', 200), pg_temp.digest('tok-200')) ->> 'status', 'created',
  'a 200-character name is created');
select is(ql_api.subject_create_v1('user', 'Zoë Ünal (ops)', pg_temp.digest('tok-zoe')) ->> 'status', 'created',
  'a name with spaces and non-ASCII letters is created');

-- ---------------------------------------------------------------------------------------------
-- 2. fenced token_in_use: a digest already registered registers nothing.
select pg_temp.ostate() as before \gset
select is(ql_api.subject_create_v1('user', 'bob', pg_temp.digest('raw-token-of-alice-3f9a')),
  '{"status": "fenced", "reason": "token_in_use"}', 'a digest already in use is fenced token_in_use');
select is(pg_temp.ostate(), :'before', 'token_in_use registers nothing and changes nothing');
select is(ql_api.subject_create_v1('agent', 'alice', pg_temp.digest('raw-token-of-alice-3f9a')),
  '{"status": "fenced", "reason": "token_in_use"}', 'the same digest is in use whatever the kind and name');
select is(pg_temp.ostate(), :'before', 'a replay of the same subject is fenced and nothing changes');
update ql.subjects set status = 'disabled' where id = :'alice';
select pg_temp.ostate() as before \gset
select is(ql_api.subject_create_v1('user', 'alice', pg_temp.digest('raw-token-of-alice-3f9a')),
  '{"status": "fenced", "reason": "token_in_use"}', 'a disabled subject''s digest stays in use');
select is(pg_temp.ostate(), :'before', 'a disabled subject''s digest is fenced and nothing is revived');
select is(ql_api.subject_create_v1('user', 'alice', pg_temp.digest('alice-again')),
  '{"status": "fenced", "reason": "name_taken"}', 'a disabled subject''s name stays taken');
select is(pg_temp.ostate(), :'before', 'and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- 3. invalid: nothing changes.
select pg_temp.ostate() as before \gset
select is(ql_api.subject_create_v1(null, 'carol', pg_temp.digest('tok-carol')), '{"status": "invalid", "reason": "kind"}',
  'a NULL kind is invalid');
select is(pg_temp.ostate(), :'before', 'a NULL kind is invalid and nothing changes');
select is(ql_api.subject_create_v1('admin', 'carol', pg_temp.digest('tok-carol')), '{"status": "invalid", "reason": "kind"}',
  'a kind outside user/agent/system is invalid');
select is(pg_temp.ostate(), :'before', 'an unknown kind is invalid and nothing changes');
select is(ql_api.subject_create_v1('User', 'carol', pg_temp.digest('tok-carol')), '{"status": "invalid", "reason": "kind"}',
  'kinds are exact: User is invalid');
select is(pg_temp.ostate(), :'before', 'an upper-case kind is invalid and nothing changes');
select is(ql_api.subject_create_v1('worker', 'carol', pg_temp.digest('tok-carol')), '{"status": "invalid", "reason": "kind"}',
  'worker is an actor kind, not a subject kind: invalid');
select is(pg_temp.ostate(), :'before', 'kind worker is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', null, pg_temp.digest('tok-carol')), '{"status": "invalid", "reason": "name"}',
  'a NULL name is invalid');
select is(pg_temp.ostate(), :'before', 'a NULL name is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', '', pg_temp.digest('tok-carol')), '{"status": "invalid", "reason": "name"}',
  'an empty name is invalid');
select is(pg_temp.ostate(), :'before', 'an empty name is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', repeat('n', 201), pg_temp.digest('tok-carol')),
  '{"status": "invalid", "reason": "name"}', 'a 201-character name is invalid');
select is(pg_temp.ostate(), :'before', 'a 201-character name is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', 'carol', null), '{"status": "invalid", "reason": "token_digest"}',
  'a NULL digest is invalid');
select is(pg_temp.ostate(), :'before', 'a NULL digest is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', 'carol', substr(pg_temp.digest('tok-carol'), 1, 31)),
  '{"status": "invalid", "reason": "token_digest"}', 'a 31-byte digest is invalid');
select is(pg_temp.ostate(), :'before', 'a 31-byte digest is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', 'carol', pg_temp.digest('tok-carol') || '\x00'::bytea),
  '{"status": "invalid", "reason": "token_digest"}', 'a 33-byte digest is invalid');
select is(pg_temp.ostate(), :'before', 'a 33-byte digest is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', 'carol', convert_to('tok-carol', 'UTF8')),
  '{"status": "invalid", "reason": "token_digest"}', 'a raw token passed as the digest is invalid (not 32 bytes)');
select is(pg_temp.ostate(), :'before', 'a raw token in place of the digest is refused and nothing is stored');
-- A name that reads as a uuid: ql_api.subject_status_set_v1 tries an id first, so it could never name its subject.
select is(ql_api.subject_create_v1('user', '0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b', pg_temp.digest('tok-carol')),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"}', 'a name that is a uuid is invalid, with its detail');
select is(pg_temp.ostate(), :'before', 'a uuid name is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', :'alice', pg_temp.digest('tok-carol')) ->> 'reason', 'name',
  'another subject''s id as a name is invalid');
select is(pg_temp.ostate(), :'before', 'another subject''s id as a name is invalid and nothing changes');
select is(ql_api.subject_create_v1('user', '{0B5E6F2A9C1D4E3F8A7B6C5D4E3F2A1B}', pg_temp.digest('tok-carol')) ->> 'reason', 'name',
  'a uuid in braces and capitals, without hyphens, is an invalid name');
select is(pg_temp.ostate(), :'before', 'a uuid in another spelling is invalid and nothing changes');
select is(ql_api.subject_create_v1('robot', '', null), '{"status": "invalid", "reason": "kind"}',
  'with several bad arguments the first (kind) is reported');
select is(pg_temp.ostate(), :'before', 'several bad arguments are invalid and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- 4. invalid empty_token: the SHA-256 of the empty token is what the shell admits a request that
-- carries no bearer token with; a subject holding it would be anyone without credentials.
select is(pg_temp.digest(''), decode('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'hex'),
  'the refused digest is the SHA-256 of the empty string (e3b0c442…b855)');
select pg_temp.ostate() as before \gset
select pg_temp.astate() as audit_before \gset
select is(ql_api.subject_create_v1('user', 'nobody',
    decode('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'hex')),
  '{"status": "invalid", "reason": "empty_token"}', 'the digest of the empty token is invalid: empty_token');
select is(pg_temp.ostate(), :'before', 'empty_token registers nobody and changes nothing');
select is(pg_temp.astate(), :'audit_before', 'empty_token writes no audit or mutation row');
select is((select count(*)::int from ql.subjects s where s.token_digest = sha256(''::bytea)), 0,
  'no subject holds the digest of the empty token');
select is(ql_api.subject_create_v1('agent', 'anyone', sha256(''::bytea)),
  '{"status": "invalid", "reason": "empty_token"}', 'an agent with the digest of the empty token is invalid too');
select is(ql_api.subject_create_v1('system', 'anyone', sha256(''::bytea)),
  '{"status": "invalid", "reason": "empty_token"}', 'a system subject with the digest of the empty token is invalid too');
select is(pg_temp.ostate(), :'before', 'no kind registers the digest of the empty token, and nothing changes');
select is(pg_temp.astate(), :'audit_before', 'still no audit or mutation row');
select is(ql_api.subject_create_v1('robot', 'anyone', sha256(''::bytea)), '{"status": "invalid", "reason": "kind"}',
  'a bad kind is reported before the empty token (the first bad argument wins)');
select is(pg_temp.ostate(), :'before', 'a bad kind with the empty-token digest changes nothing');
-- Only that exact digest: one bit away is an ordinary digest.
select is(ql_api.subject_create_v1('user', 'near-empty',
    decode('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b854', 'hex')) ->> 'status', 'created',
  'a digest one bit away from the empty token''s is created');

select * from finish();
rollback;
