-- Tests Project secrets (docs/decisions/0015-secrets.md): ql_api.secret_set_v1, secret_delete_v1, secret_list_v1,
-- secret_rewrap_page_v1 and secret_rewrap_v1; a plan's secret names (ql.plan_is_valid, task_create_v1); delivery at
-- the starting ACK (ql_api.attempt_activation_v1: versions chosen once, recorded, replayed exactly, nothing to a
-- fenced caller, secret_unavailable when deleted); destruction of unheld versions; retention of the receipts.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(88);

-- Sealed bytes of the right shapes (the shell's; the database never sees a value).
create function pg_temp.bytes(p_byte text, p_count int) returns bytea language sql immutable
return decode(repeat(p_byte, p_count), 'hex');

-- A subject's id and its current project and binding versions (what an admission would have named), read by the
-- test's owner so that the runtime role can call the functions with them.
create function pg_temp.who(p_name text, p_project uuid, out subject uuid, out pv bigint, out bv bigint)
language sql security definer
return (select (s.id, coalesce(p.version, 0), coalesce(b.version, 0)) from ql.subjects s
          left join ql.projects p on p.id = p_project
          left join ql.role_bindings b on b.subject_id = s.id and b.project_id = p_project
         where s.name = p_name);
create function pg_temp.admit(p_name text, p_project uuid, p_permission text) returns jsonb language sql
return ql_api.request_admission_v1(sha256(convert_to('tok-' || p_name, 'UTF8')), p_project, p_permission,
                                   'PUT /api/v3/projects/{project}/secrets/{name}', 'sec.' || p_name);
create function pg_temp.put(p_subject text, p_project uuid, p_name text, p_size int, p_mutation text,
                            p_version uuid default gen_random_uuid(), p_kek text default 'kek-AAAAAAAA')
returns jsonb language sql
return (select ql_api.secret_set_v1(w.subject, p_project, p_name, p_version, p_size, p_kek, pg_temp.bytes('11', 60),
                                    pg_temp.bytes('22', 12), pg_temp.bytes('33', p_size + 16), p_mutation, w.pv, w.bv)
          from pg_temp.who(p_subject, p_project) w);
create function pg_temp.drop_secret(p_subject text, p_project uuid, p_name text, p_mutation text) returns jsonb
language sql
return (select ql_api.secret_delete_v1(w.subject, p_project, p_name, p_mutation, w.pv, w.bv)
          from pg_temp.who(p_subject, p_project) w);
-- Everything the secret functions may write.
create function pg_temp.sstate() returns text language sql
return concat_ws(E'\n', pg_temp.pstate(),
  (select string_agg('secret ' || s::text, E'\n' order by s.id) from ql.secrets s),
  (select string_agg('version ' || v::text, E'\n' order by v.id) from ql.secret_versions v),
  (select string_agg('received ' || a::text, E'\n' order by a.attempt_id, a.secret_version_id) from ql.attempt_secrets a));

-- ---------------------------------------------------------------------------------------------
-- Structure: every secret function is SECURITY DEFINER and executable by the runtime role only; no table is.
select is_definer('ql_api', 'secret_set_v1',
  array['uuid', 'uuid', 'text', 'uuid', 'integer', 'text', 'bytea', 'bytea', 'bytea', 'text', 'bigint', 'bigint'],
  'secret_set_v1 is SECURITY DEFINER');
select is_definer('ql_api', 'secret_delete_v1', array['uuid', 'uuid', 'text', 'text', 'bigint', 'bigint'],
  'secret_delete_v1 is SECURITY DEFINER');
select is_definer('ql_api', 'secret_list_v1', array['text'], 'secret_list_v1 is SECURITY DEFINER');
select is(
  array(select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         where n.nspname = 'ql_api' and p.proname like 'secret%' and not has_function_privilege('public', p.oid, 'execute')
           and has_function_privilege('ql_runtime', p.oid, 'execute') order by 1),
  array['secret_delete_v1', 'secret_list_v1', 'secret_rewrap_page_v1', 'secret_rewrap_v1', 'secret_set_v1'],
  'the runtime role, and not PUBLIC, executes the five secret functions');
set local role ql_runtime;
select throws_ok($$select count(*) from ql.secret_versions$$, '42501', 'permission denied for schema ql',
  'the runtime role cannot read a sealed version outside the API');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Setup: Project P (owner, admin, operator, viewer), Project Q (its own owner).
select pg_temp.mk_project('sec-p') as p, pg_temp.mk_project('sec-q') as q \gset
select pg_temp.mk_subject('sec-owner') as owner, pg_temp.mk_subject('sec-admin') as admin,
       pg_temp.mk_subject('sec-op') as op, pg_temp.mk_subject('sec-viewer') as viewer,
       pg_temp.mk_subject('sec-qowner') as qowner \gset
insert into ql.role_bindings (project_id, subject_id, role)
values (:'p', :'owner', 'owner'), (:'p', :'admin', 'admin'), (:'p', :'op', 'operator'), (:'p', :'viewer', 'viewer'),
       (:'q', :'qowner', 'owner');

-- ---------------------------------------------------------------------------------------------
-- Permissions: secret.write for owner and admin; secret.read for every role.
select is(array(select r from unnest(array['owner', 'admin', 'operator', 'viewer']) r
                 where ql.role_allows(r, 'secret.write') order by 1),
  array['admin', 'owner'], 'secret.write: owner and admin only');
select is(array(select r from unnest(array['owner', 'admin', 'operator', 'viewer']) r
                 where ql.role_allows(r, 'secret.read') order by 1),
  array['admin', 'operator', 'owner', 'viewer'], 'secret.read: every role (names only, never a value)');
select is(pg_temp.admit('sec-viewer', :'p', 'secret.read') ->> 'decision', 'allow', 'admission allows a viewer secret.read');
select is(pg_temp.admit('sec-op', :'p', 'secret.write') ->> 'reason', 'role.insufficient',
  'admission denies an operator secret.write');

-- ---------------------------------------------------------------------------------------------
-- Set: a first version, a second, a replay, a conflict.
select '00000000-0000-4000-8000-0000000000a1' as v1 \gset
set local role ql_runtime;
select pg_temp.put('sec-owner', :'p', 'API_TOKEN', 20, 'm-1', :'v1') as set1 \gset
reset role;
select is(:'set1'::jsonb - 'setAtMs', '{"status": "set", "name": "API_TOKEN", "version": 1, "size": 20}',
  'the first set answers version 1 with its size');
select is((select (current_version, destroyed_at_ms is null, size, kek_id, octet_length(ciphertext))::text
             from ql.secrets s join ql.secret_versions v on v.secret_id = s.id where v.id = :'v1'),
  '(1,t,20,kek-AAAAAAAA,36)', 'the version holds the sealed bytes as given, under the id the shell chose');
set local role ql_runtime;
select is(pg_temp.put('sec-owner', :'p', 'API_TOKEN', 20, 'm-1') - 'setAtMs',
  '{"status": "already_set", "name": "API_TOKEN", "version": 1, "size": 20}'::jsonb,
  'the same mutation replays its first answer');
reset role;
select is((select count(*) from ql.secret_versions), 1::bigint, 'a replay stores nothing');
select pg_temp.sstate() as before \gset
set local role ql_runtime;
select is(pg_temp.put('sec-owner', :'p', 'OTHER', 20, 'm-1'), '{"status": "fenced", "reason": "mutation_conflict"}',
  'another command under a used mutation id is fenced');
reset role;
select is(pg_temp.sstate(), :'before', 'a conflict changes nothing');

-- Invalid input: each refused, nothing changed.
set local role ql_runtime;
select is(pg_temp.put('sec-owner', :'p', 'lower_case', 20, 'm-x'), '{"status": "invalid", "reason": "name"}', 'a lowercase name is invalid');
select is(pg_temp.put('sec-owner', :'p', '1ABC', 20, 'm-x'), '{"status": "invalid", "reason": "name"}', 'a leading digit is invalid');
select is(pg_temp.put('sec-owner', :'p', repeat('A', 65), 20, 'm-x'), '{"status": "invalid", "reason": "name"}', 'a 65-character name is invalid');
select is(pg_temp.put('sec-owner', :'p', 'BIG', 65537, 'm-x'), '{"status": "invalid", "reason": "size"}', 'more than 64 KiB is invalid');
select is(pg_temp.put('sec-owner', :'p', 'EMPTY', 0, 'm-x'), '{"status": "invalid", "reason": "size"}', 'an empty value is invalid');
select is(pg_temp.put('sec-owner', :'p', 'KEK', 20, 'm-x', gen_random_uuid(), 'short'),
  '{"status": "invalid", "reason": "sealed"}', 'a malformed key id is invalid');
select is(ql_api.secret_set_v1(:'owner', :'p', 'SHAPE', gen_random_uuid(), 20, 'kek-AAAAAAAA', pg_temp.bytes('11', 60),
                               pg_temp.bytes('22', 12), pg_temp.bytes('33', 20), 'm-x', 1, 1),
  '{"status": "invalid", "reason": "sealed"}', 'a ciphertext that is not size + 16 bytes is invalid');
select is(pg_temp.put('sec-owner', :'p', 'REUSED', 20, 'm-x', :'v1'), '{"status": "invalid", "reason": "version_id"}',
  'a version id already used is invalid');
select is(ql_api.secret_set_v1(:'owner', :'p', 'NOADMIT', gen_random_uuid(), 20, 'kek-AAAAAAAA', pg_temp.bytes('11', 60),
                               pg_temp.bytes('22', 12), pg_temp.bytes('33', 36), 'm-x', null, 1),
  '{"status": "invalid", "reason": "admitted_version"}', 'no admitted versions is invalid');
-- The policy is re-verified in the transaction.
select is(pg_temp.put('sec-op', :'p', 'BY_OPERATOR', 20, 'm-op'), '{"status": "fenced", "reason": "role_insufficient"}',
  'an operator cannot set a secret');
select is(pg_temp.put('sec-viewer', :'p', 'BY_VIEWER', 20, 'm-v'), '{"status": "fenced", "reason": "role_insufficient"}',
  'a viewer cannot set a secret');
select is(pg_temp.put('sec-qowner', :'p', 'CROSS', 20, 'm-q'), '{"status": "not_found", "reason": "project"}',
  'another Project''s owner cannot set a secret here');
reset role;
select is(pg_temp.sstate(), :'before', 'no refused set changed anything');

-- ---------------------------------------------------------------------------------------------
-- List: names, versions, sizes, who and when; never a sealed byte; another Project's never.
set local role ql_runtime;
select pg_temp.put('sec-admin', :'p', 'COOKIE', 100, 'm-2') is not null as ok \gset
select pg_temp.put('sec-qowner', :'q', 'Q_ONLY', 10, 'm-3') is not null as ok \gset
select ql_api.secret_list_v1(:'p') as listed \gset
reset role;
select is(jsonb_path_query_array(:'listed'::jsonb, '$.secrets[*].name'), '["API_TOKEN", "COOKIE"]',
  'a Project''s secrets are listed by name, another Project''s not');
select is((select jsonb_agg(k order by k) from jsonb_object_keys(:'listed'::jsonb -> 'secrets' -> 0) k),
  '["createdAtMs", "name", "setAtMs", "setBy", "size", "version"]', 'each entry has exactly the metadata keys');
select is(:'listed'::jsonb -> 'secrets' -> 1 ->> 'setBy', 'sec-admin', 'who set it is named');
select is(ql_api.secret_list_v1('sec-q') -> 'secrets' -> 0 ->> 'name', 'Q_ONLY', 'a Project is found by name too');
select is(ql_api.secret_list_v1('nope'), '{"status": "not_found", "reason": "project"}', 'an unknown Project is not found');

-- ---------------------------------------------------------------------------------------------
-- Plans name secrets: shape (ql.plan_is_valid) and existence (task_create_v1).
select ok(ql.plan_is_valid('{"argv": ["x"], "secretEnv": {"TOKEN": "API_TOKEN"}, "secretFiles": {"conf/c.txt": "COOKIE"}}'),
  'secretEnv and secretFiles naming secrets are valid');
select ok(not ql.plan_is_valid('{"argv": ["x"], "secretEnv": {"TOKEN": "lower"}}'), 'a secret name must be upper case');
select ok(not ql.plan_is_valid('{"argv": ["x"], "env": {"TOKEN": "x"}, "secretEnv": {"TOKEN": "API_TOKEN"}}'),
  'a variable cannot be both plain and secret');
select ok(not ql.plan_is_valid('{"argv": ["x"], "secretEnv": {}}'), 'an empty secretEnv is invalid');
select ok(not ql.plan_is_valid('{"argv": ["x"], "secretFiles": {"/etc/passwd": "COOKIE"}}'), 'an absolute secret file is invalid');
select ok(not ql.plan_is_valid('{"argv": ["x"], "secretFiles": {"a/../../b": "COOKIE"}}'), 'a secret file with .. is invalid');
select ok(not ql.plan_is_valid('{"argv": ["x"], "secretFiles": {"./b": "COOKIE"}}'), 'a secret file with . is invalid');
select ok(not ql.plan_is_valid(jsonb_build_object('argv', '["x"]'::jsonb, 'secretEnv',
            (select jsonb_object_agg('V' || i, 'S' || i) from generate_series(1, 17) i))),
  'more than 16 secret names is invalid');
select is(ql.plan_secret_names('{"argv": ["x"], "secretEnv": {"A": "S2", "B": "S1"}, "secretFiles": {"f": "S2"}}'),
  array['S1', 'S2'], 'the names a plan refers to, distinct and sorted');
select pg_temp.sstate() as before \gset
select is(ql_api.task_create_v1(:'p', 'needs-missing', '{"argv": ["x"], "secretEnv": {"T": "API_TOKEN", "M": "MISSING"}}'),
  '{"status": "not_found", "reason": "secret", "detail": "MISSING"}', 'a plan naming a missing secret is refused, with its name');
select is(ql_api.task_create_v1(:'p', 'needs-q', '{"argv": ["x"], "secretEnv": {"T": "Q_ONLY"}}'),
  '{"status": "not_found", "reason": "secret", "detail": "Q_ONLY"}', 'another Project''s secret is missing here');
select is(pg_temp.sstate(), :'before', 'a refused task changes nothing');
select is(ql_api.task_create_v1(:'p', 'uses-secrets',
            '{"argv": ["x"], "secretEnv": {"TOKEN": "API_TOKEN"}, "secretFiles": {"c.txt": "COOKIE"}}') ->> 'status',
  'created', 'a plan naming the Project''s secrets is created');
select is((select r.plan_json from ql.task_execution_revisions r join ql.tasks t on t.current_revision_id = r.id
            where t.name = 'uses-secrets'),
  '{"argv": ["x"], "secretEnv": {"TOKEN": "API_TOKEN"}, "secretFiles": {"c.txt": "COOKIE"}}'::jsonb,
  'the plan holds names, never a value');

-- ---------------------------------------------------------------------------------------------
-- Delivery at the starting ACK.
select 'sec-pool' as pool \gset
select pg_temp.mk_worker(:'pool') as w \gset
select pg_temp.mk_run(pg_temp.mk_revision(:'p',
         '{"argv": ["x"], "pool": "sec-pool", "secretEnv": {"TOKEN": "API_TOKEN"}, "secretFiles": {"c.txt": "COOKIE"}}'))
       as run1 \gset
set local role ql_runtime;
select pg_temp.open_session(:'w') as s \gset
select pg_temp.pull(:'w', :'s') as o1 \gset
select is(pg_temp.activate('starting', :'w', :'s', :'o1', 'wrong-token'), '{"status": "fenced", "reason": "token_mismatch"}',
  'a fenced starting ACK gets no secret');
select pg_temp.activate('starting', :'w', :'s', :'o1') as a1 \gset
reset role;
select is(:'a1'::jsonb ->> 'status', 'applied', 'the starting ACK applies');
select is(jsonb_path_query_array(:'a1'::jsonb, '$.secrets[*].name'), '["API_TOKEN", "COOKIE"]',
  'it carries the sealed versions of the secrets the plan names, by name');
select is(jsonb_path_query_array(:'a1'::jsonb, '$.secrets[*].version'), '[1, 1]', 'the current versions');
select is(decode(:'a1'::jsonb -> 'secrets' -> 0 ->> 'ciphertext', 'base64'), pg_temp.bytes('33', 36),
  'the sealed bytes travel as stored (base64), for the shell to open');
select is(:'a1'::jsonb -> 'secrets' -> 0 ->> 'versionId', :'v1', 'with the version id bound in their associated data');
select is((select e.payload -> 'secrets' from ql.run_events e where e.run_id = :'run1' and e.type = 'attempt.starting'),
  '{"COOKIE": 1, "API_TOKEN": 1}', 'the attempt.starting event names the versions, never a value');
select is((select count(*) from ql.attempt_secrets where attempt_id = (:'o1'::jsonb ->> 'attemptId')::uuid), 2::bigint,
  'the database records which versions the Attempt received');

-- A rotation mid-run: the replay delivers exactly what was received; the old version stays while the Attempt lives.
set local role ql_runtime;
select pg_temp.put('sec-owner', :'p', 'API_TOKEN', 30, 'm-rot') ->> 'version' as rot \gset
select pg_temp.activate('starting', :'w', :'s', :'o1') as replay \gset
select is(pg_temp.activate('running', :'w', :'s', :'o1') ->> 'status', 'applied', 'the running ACK applies');
select ok(not (pg_temp.activate('running', :'w', :'s', :'o1') ? 'secrets'), 'a running ACK never carries secrets');
select pg_temp.activate('starting', :'w', :'s', :'o1') as replay2 \gset
reset role;
select is(:'rot'::int, 2, 'the rotation made version 2');
select is(:'replay'::jsonb -> 'secrets', :'a1'::jsonb -> 'secrets', 'a replayed starting ACK delivers exactly the versions received');
select is(:'replay2'::jsonb ->> 'status', 'already_running', 'a late starting ACK after running answers already_running');
select is(:'replay2'::jsonb -> 'secrets', :'a1'::jsonb -> 'secrets', '... with the same secrets (a restarted Worker masks with them)');
select ok((select destroyed_at_ms is null from ql.secret_versions where id = :'v1'),
  'version 1 stays sealed while a live Attempt holds it');

-- A new Attempt gets version 2; once nothing holds version 1, the next set destroys it.
select pg_temp.mk_run(pg_temp.mk_revision(:'p', '{"argv": ["x"], "pool": "sec-pool", "secretEnv": {"T": "API_TOKEN"}}')) as run2 \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s', 'token-b') as o2 \gset
select pg_temp.activate('starting', :'w', :'s', :'o2', 'token-b') as a2 \gset
select is(pg_temp.complete(:'w', :'s', :'o1', 1, 0) ->> 'status', 'completed', 'the first Attempt completes');
select pg_temp.put('sec-owner', :'p', 'API_TOKEN', 40, 'm-rot2') ->> 'version' as rot2 \gset
reset role;
select is(jsonb_path_query_array(:'a2'::jsonb, '$.secrets[*].version'), '[2]', 'a later Attempt receives the current version');
select is((select destroyed_at_ms is not null and ciphertext is null and wrapped_key is null and nonce is null and kek_id is null
             from ql.secret_versions where id = :'v1'),
  true, 'version 1, held by no live Attempt, is destroyed by the next set (its row stays)');
select is((select count(*) from ql.secret_versions v join ql.secrets s on s.id = v.secret_id
            where s.name = 'API_TOKEN' and v.destroyed_at_ms is null), 2::bigint,
  'version 2 (held by the live Attempt) and version 3 (current) stay sealed');

-- Delete: every version destroyed at once; a later starting ACK fails secret_unavailable, nothing to spawn.
select pg_temp.mk_run(pg_temp.mk_revision(:'p', '{"argv": ["x"], "pool": "sec-pool", "secretEnv": {"T": "COOKIE"}}')) as run3 \gset
set local role ql_runtime;
select is(pg_temp.drop_secret('sec-op', :'p', 'COOKIE', 'd-0'), '{"status": "fenced", "reason": "role_insufficient"}',
  'an operator cannot delete a secret');
select is(pg_temp.drop_secret('sec-owner', :'p', 'COOKIE', 'd-1'), '{"status": "deleted", "name": "COOKIE"}', 'the owner deletes it');
select is(pg_temp.drop_secret('sec-owner', :'p', 'COOKIE', 'd-1'), '{"status": "deleted", "name": "COOKIE"}', 'a replay answers the same');
select is(pg_temp.drop_secret('sec-owner', :'p', 'COOKIE', 'd-2'), '{"status": "already_deleted", "name": "COOKIE"}',
  'deleting it again answers already_deleted');
select is(pg_temp.drop_secret('sec-owner', :'p', 'NEVER', 'd-3'), '{"status": "not_found", "reason": "secret"}',
  'an unknown secret is not found');
select pg_temp.pull(:'w', :'s', 'token-c') as o3 \gset
select pg_temp.activate('starting', :'w', :'s', :'o3', 'token-c') as a3 \gset
reset role;
select is((select count(*) from ql.secret_versions v join ql.secrets s on s.id = v.secret_id
            where s.name = 'COOKIE' and v.destroyed_at_ms is null), 0::bigint,
  'a deleted secret has no sealed version left, even one a live Attempt received');
select is(:'a3'::jsonb ->> 'status', 'not_started', 'a starting ACK for a plan naming a deleted secret answers not_started');
select is(:'a3'::jsonb -> 'snapshot' ->> 'errorCode', 'secret_unavailable', '... and ends the Attempt secret_unavailable');
select ok(not (:'a3'::jsonb ? 'secrets'), '... with no secret');
select is(jsonb_path_query_array(:'listed'::jsonb, '$.secrets[*].name'), '["API_TOKEN", "COOKIE"]', '(listed before)');
set local role ql_runtime;
select is(jsonb_path_query_array(ql_api.secret_list_v1(:'p'), '$.secrets[*].name'), '["API_TOKEN"]',
  'a deleted secret is no longer listed');
select is(pg_temp.activate('starting', :'w', :'s', :'o1') -> 'secrets', null,
  'a replay to the ended first Attempt delivers nothing');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Rotation of the key-encryption key: a page of versions under another key, then compare-and-set.
set local role ql_runtime;
select ql_api.secret_rewrap_page_v1('kek-BBBBBBBB', 100) as page \gset
select is(jsonb_array_length(:'page'::jsonb -> 'versions'), 3,
  'the page lists every still sealed version under another key (API_TOKEN 2 and 3, Q_ONLY 1)');
select :'page'::jsonb -> 'versions' -> 0 ->> 'versionId' as rv \gset
select is(ql_api.secret_rewrap_v1(:'rv', 'kek-AAAAAAAA', 'kek-BBBBBBBB', pg_temp.bytes('44', 60)), '{"status": "rewrapped"}',
  'a rewrap under the key it was read with applies');
select is(ql_api.secret_rewrap_v1(:'rv', 'kek-AAAAAAAA', 'kek-BBBBBBBB', pg_temp.bytes('55', 60)), '{"status": "unchanged"}',
  'a second shell''s rewrap of the same version changes nothing');
select is(jsonb_array_length(ql_api.secret_rewrap_page_v1('kek-BBBBBBBB', 100) -> 'versions'), 2, 'the page shrinks');
select ql_api.secret_rewrap_page_v1('kek-BBBBBBBB', 1) -> 'versions' -> 0 ->> 'versionId' as first_left \gset
select is(jsonb_path_query_array(ql_api.secret_rewrap_page_v1('kek-BBBBBBBB', 100, :'first_left'), '$.versions[*].versionId'),
  jsonb_path_query_array(ql_api.secret_rewrap_page_v1('kek-BBBBBBBB', 100), '$.versions[1 to last].versionId'),
  'a page after a version id starts past it: a version left under a key the shell lacks holds up no other');
select is(jsonb_array_length(ql_api.secret_rewrap_page_v1('kek-BBBBBBBB', 100, 'ffffffff-ffff-4fff-bfff-ffffffffffff')
  -> 'versions'), 0, 'and is empty past the last version');
select is(ql_api.secret_rewrap_v1(:'rv', 'kek-AAAAAAAA', 'kek-AAAAAAAA', pg_temp.bytes('55', 60)),
  '{"status": "invalid", "reason": "sealed"}', 'a rewrap to the same key is invalid');
reset role;
select is((select wrapped_key from ql.secret_versions where id = :'rv'), pg_temp.bytes('44', 60),
  'the first rewrap''s wrapped key is the one kept');

-- ---------------------------------------------------------------------------------------------
-- Retention: pruning an ended Run takes its Attempts' receipts with it; the versions stay.
update ql.settings set run_retention_days = 1;
update ql.runs set ended_at_ms = ended_at_ms - 3 * 86400000 where id = :'run1';
select ok((ql_api.prune_v1(100) ->> 'runs')::int >= 1, 'prune deletes the old Run');
select is((select count(*) from ql.attempt_secrets where attempt_id = (:'o1'::jsonb ->> 'attemptId')::uuid), 0::bigint,
  'its Attempt''s secret receipts go with it');

select * from finish();
rollback;
