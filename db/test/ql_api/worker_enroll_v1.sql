-- Tests ql_api.worker_enroll_v1: a Worker is enrolled at generation 1, re-enrolled at generation 2 (new certificate
-- and pool, its live session closed in the same transaction, so a pull or a lease renewal through the old session
-- is fenced stale_session), invalid arguments and a name another Worker holds (fenced name_taken) change nothing
-- (not even the live session), and no runtime or scheduler role may enrol a Worker (operators call it as a DBA,
-- through the CLI).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(69);

-- Everything the control plane stores: runs, attempts, …, sessions, projects, subjects, tasks, revisions, workers.
create function pg_temp.ostate() returns text language sql
return concat_ws(E'\n', pg_temp.state(),
  (select string_agg('project ' || p::text, E'\n' order by p.id) from ql.projects p),
  (select string_agg('subject ' || s::text, E'\n' order by s.id) from ql.subjects s),
  (select string_agg('task ' || t::text, E'\n' order by t.id) from ql.tasks t),
  (select string_agg('revision ' || r::text, E'\n' order by r.id) from ql.task_execution_revisions r),
  (select string_agg('worker ' || w::text, E'\n' order by w.id) from ql.workers w));

-- A refused enrolment: its answer, and whether the stored state is exactly what it was before the call.
create function pg_temp.refused(p_worker uuid, p_name text, p_pool text, p_fingerprint bytea) returns text
language plpgsql as $$
declare
  v_before text := pg_temp.ostate();
  v_result jsonb := ql_api.worker_enroll_v1(p_worker, p_name, p_pool, p_fingerprint);
begin
  return v_result::text || case when pg_temp.ostate() is not distinct from v_before
                                then ' and nothing changed' else ' but the state changed' end;
end $$;

-- A Worker row as text: (name, pool, generation, status, fingerprint = digest(p_cert)).
create function pg_temp.worker_row(p_worker uuid, p_cert text) returns text language sql
return (select (w.name, w.pool, w.generation, w.status, w.cert_fingerprint = pg_temp.digest(p_cert))::text
          from ql.workers w where w.id = p_worker);

-- A session as text: (status, ended).
create function pg_temp.session_row(p_session uuid) returns text language sql
return (select (s.status, s.ended_at_ms is not null)::text from ql.worker_sessions s where s.id = p_session);

-- ---------------------------------------------------------------------------------------------
-- Structure: an operator's command, SECURITY DEFINER, executable by its owner only.
select has_function('ql_api', 'worker_enroll_v1', array['uuid', 'text', 'text', 'bytea'],
  'worker_enroll_v1(worker, name, pool, certificate fingerprint) exists');
select is_definer('ql_api', 'worker_enroll_v1', array['uuid', 'text', 'text', 'bytea'],
  'worker_enroll_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'worker_enroll_v1', array['uuid', 'text', 'text', 'bytea'], 'jsonb',
  'worker_enroll_v1 answers a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p
            where p.oid = 'ql_api.worker_enroll_v1(uuid, text, text, bytea)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'worker_enroll_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'worker_enroll_v1', array['uuid', 'text', 'text', 'bytea'], 'ql_owner', array['EXECUTE'],
  'only its owner ql_owner (an operator acting as DBA) may enrol a Worker');
select function_privs_are('ql_api', 'worker_enroll_v1', array['uuid', 'text', 'text', 'bytea'], 'ql_runtime',
  array[]::text[], 'the runtime role (the shell) may not enrol a Worker');
select function_privs_are('ql_api', 'worker_enroll_v1', array['uuid', 'text', 'text', 'bytea'], 'ql_scheduler',
  array[]::text[], 'the scheduler role may not enrol a Worker');
select function_privs_are('ql_api', 'worker_enroll_v1', array['uuid', 'text', 'text', 'bytea'], 'public',
  array[]::text[], 'PUBLIC may not enrol a Worker');

-- ---------------------------------------------------------------------------------------------
-- Setup: two queued Runs in pool we-old, one Worker W2 of that pool with a live session (a bystander).
select pg_temp.mk_project('we-p') as p \gset
select pg_temp.mk_revision(:'p', '{"argv": ["true"], "pool": "we-old"}') as rev \gset
select pg_temp.mk_run(:'rev') as run1 \gset
select pg_temp.mk_run(:'rev') as run2 \gset
select pg_temp.mk_worker('we-other') as w2 \gset
select gen_random_uuid() as w \gset
set local role ql_runtime;
select pg_temp.open_session(:'w2') as s_w2 \gset
reset role;

select pg_temp.ostate() as before \gset
set local role ql_runtime;
select throws_ok(format($$select ql_api.worker_enroll_v1(%L, 'rogue', 'we-old', sha256('x'::bytea))$$, :'w'), '42501',
  'permission denied for function worker_enroll_v1',
  'the runtime role calling worker_enroll_v1 is refused: 42501 (the shell cannot enrol itself a Worker)');
reset role;
set local role ql_scheduler;
select throws_ok(format($$select ql_api.worker_enroll_v1(%L, 'rogue', 'we-old', sha256('x'::bytea))$$, :'w'), '42501',
  'permission denied for function worker_enroll_v1', 'the scheduler role calling worker_enroll_v1 is refused: 42501');
reset role;
select is(pg_temp.ostate(), :'before', 'the refused calls enrol nobody and change nothing');

-- ---------------------------------------------------------------------------------------------
-- 1. enrolled: generation 1, active, with the fingerprint given.
select ql_api.worker_enroll_v1(:'w', 'builder-1', 'we-old', pg_temp.digest('cert-a')) as enrolled \gset

select is(array(select k from jsonb_object_keys(:'enrolled'::jsonb) k order by k),
  array['generation', 'status', 'workerId'], 'enrolled answers exactly status, workerId and generation');
select is(:'enrolled'::jsonb, jsonb_build_object('status', 'enrolled', 'workerId', :'w'::uuid, 'generation', 1),
  'a new Worker id is enrolled at generation 1');
select is(pg_temp.worker_row(:'w', 'cert-a'), '(builder-1,we-old,1,active,t)',
  'the Worker is stored with the id, name, pool and fingerprint given, generation 1, active');
select is((select count(*)::int from ql.worker_sessions s where s.worker_id = :'w'), 0,
  'enrolment opens no session');

-- The enrolled Worker works: a session (replacing a first one) and a Run held to running.
set local role ql_runtime;
select pg_temp.open_session(:'w') as s0 \gset
select pg_temp.offer_at(:'w') as o \gset
reset role;
select :'o'::jsonb ->> 'sessionId' as s1 \gset
select is(array[pg_temp.session_row(:'s0'), pg_temp.session_row(:'s1')], array['(replaced,t)', '(live,f)'],
  'before re-enrolment the first session is replaced and the second is live');
select (select s.ended_at_ms from ql.worker_sessions s where s.id = :'s0') as s0_ended \gset
select (select s::text from ql.worker_sessions s where s.id = :'s_w2') as w2_session_row \gset
select (select r::text from ql.runs r where r.id = :'run2') as run2_row \gset

-- ---------------------------------------------------------------------------------------------
-- 2. reenrolled: generation 2, certificate and pool updated, the live session closed.
select ql.now_ms() as t0 \gset
select ql_api.worker_enroll_v1(:'w', 'builder-1b', 'we-new', pg_temp.digest('cert-b')) as reenrolled \gset
select ql.now_ms() as t1 \gset

select is(:'reenrolled'::jsonb, jsonb_build_object('status', 'reenrolled', 'workerId', :'w'::uuid, 'generation', 2),
  'enrolling the same id again is reenrolled at generation 2');
select is(pg_temp.worker_row(:'w', 'cert-b'), '(builder-1b,we-new,2,active,t)',
  'the Worker now has the new name, pool and certificate fingerprint at generation 2');
select is(pg_temp.session_row(:'s1'), '(closed,t)', 'the live session is closed by the re-enrolment');
select ok((select s.ended_at_ms between :t0 and :t1 from ql.worker_sessions s where s.id = :'s1'),
  'the closed session ended at database time read during the re-enrolment');
select is((select count(*)::int from ql.worker_sessions s where s.worker_id = :'w' and s.status = 'live'), 0,
  'the re-enrolled Worker has no live session');
select results_eq(format('select s.status, s.ended_at_ms::bigint from ql.worker_sessions s where s.id = %L', :'s0'),
  format('values (%L::text, %s::bigint)', 'replaced', :'s0_ended'),
  'a session replaced earlier keeps its status and end time');
select is((select s::text from ql.worker_sessions s where s.id = :'s_w2'), :'w2_session_row',
  'another Worker''s live session is untouched');
select is((select count(*)::int from ql.workers w where w.id = :'w'), 1, 're-enrolment adds no second Worker row');

-- A pull through the old session is fenced stale_session and changes nothing.
select pg_temp.ostate() as before \gset
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s1', 1, pg_temp.digest('token-b')), '{"status": "fenced", "reason": "stale_session"}',
  'a pull through the session closed by re-enrolment is fenced stale_session');
reset role;
select is(pg_temp.ostate(), :'before', 'the fenced pull offers nothing and changes nothing');
select is((select r::text from ql.runs r where r.id = :'run2'), :'run2_row', 'the queued Run was not offered');

-- A lease renewal of the Attempt the old generation holds is fenced too.
set local role ql_runtime;
select is(pg_temp.lease(:'w', :'s1', :'o'::jsonb, 1), '{"status": "fenced", "reason": "stale_session"}',
  'renewing the old generation''s Lease through the closed session is fenced stale_session');
reset role;
select is(pg_temp.ostate(), :'before', 'the fenced renewal changes nothing');

-- Only the new generation with the new certificate opens a session.
set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, pg_temp.digest('cert-a'), 4),
  '{"status": "fenced", "reason": "stale_generation"}', 'a session of generation 1 is fenced stale_generation');
select is(ql_api.worker_session_open_v1(:'w', 2, pg_temp.digest('cert-a'), 4),
  '{"status": "fenced", "reason": "certificate_mismatch"}', 'the old certificate is fenced certificate_mismatch');
reset role;
select is(pg_temp.ostate(), :'before', 'the fenced session opens change nothing');
set local role ql_runtime;
select ql_api.worker_session_open_v1(:'w', 2, pg_temp.digest('cert-b'), 4) as opened2 \gset
reset role;
select :'opened2'::jsonb ->> 'sessionId' as s2 \gset
select is(array[:'opened2'::jsonb ->> 'status', :'opened2'::jsonb ->> 'workerGeneration',
                :'opened2'::jsonb ->> 'replacedSessionId'], array['opened', '2', null],
  'generation 2 with the new certificate opens a session, replacing none (the old one is already closed)');
set local role ql_runtime;
select is(ql_api.offer_pull_v1(:'w', :'s2', 2, pg_temp.digest('token-c')), '{"status": "empty", "reason": "no_work"}',
  'the new session pulls from the new pool only (nothing queued in we-new)');
reset role;

-- Re-enrolling again, even with the same certificate and pool, is generation 3 and closes the new session.
select ql_api.worker_enroll_v1(:'w', 'builder-1b', 'we-new', pg_temp.digest('cert-b')) as third \gset
select is(:'third'::jsonb, jsonb_build_object('status', 'reenrolled', 'workerId', :'w'::uuid, 'generation', 3),
  'an unchanged re-enrolment still bumps the generation (3)');
select is(pg_temp.session_row(:'s2'), '(closed,t)', 'the third enrolment closes the session of generation 2');

-- A disabled Worker is re-enrolled as active.
update ql.workers set status = 'disabled' where id = :'w';
select is(ql_api.worker_enroll_v1(:'w', 'builder-1b', 'we-new', pg_temp.digest('cert-c')) ->> 'generation', '4',
  'a disabled Worker is re-enrolled at the next generation');
select is(pg_temp.worker_row(:'w', 'cert-c'), '(builder-1b,we-new,4,active,t)', 'the re-enrolled Worker is active again');

-- Boundaries: a 200-character name, a 64-character pool.
select is(ql_api.worker_enroll_v1(gen_random_uuid(), repeat('n', 200), repeat('p', 64), pg_temp.digest('cert-d'))
  ->> 'status', 'enrolled', 'a 200-character name and a 64-character pool are enrolled');
select is(ql_api.worker_enroll_v1(gen_random_uuid(), 'x', 'a_b-9', pg_temp.digest('cert-e')) ->> 'status', 'enrolled',
  'a one-character name and a pool of [a-z0-9_-] are enrolled');

-- ---------------------------------------------------------------------------------------------
-- 3. invalid: nothing changes, for a new id and for an enrolled Worker (whose live session stays live).
set local role ql_runtime;
select ql_api.worker_session_open_v1(:'w', 4, pg_temp.digest('cert-c'), 4) ->> 'sessionId' as s4 \gset
reset role;
select is(pg_temp.refused(null, 'builder', 'default', pg_temp.digest('cert-x')),
  '{"reason": "worker_id", "status": "invalid"} and nothing changed', 'a NULL worker id is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), null, 'default', pg_temp.digest('cert-x')),
  '{"reason": "name", "status": "invalid"} and nothing changed', 'a NULL name is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), '', 'default', pg_temp.digest('cert-x')),
  '{"reason": "name", "status": "invalid"} and nothing changed', 'an empty name is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), repeat('n', 201), 'default', pg_temp.digest('cert-x')),
  '{"reason": "name", "status": "invalid"} and nothing changed', 'a 201-character name is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', null, pg_temp.digest('cert-x')),
  '{"reason": "pool", "status": "invalid"} and nothing changed', 'a NULL pool is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', '', pg_temp.digest('cert-x')),
  '{"reason": "pool", "status": "invalid"} and nothing changed', 'an empty pool is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', 'GPU', pg_temp.digest('cert-x')),
  '{"reason": "pool", "status": "invalid"} and nothing changed', 'an upper-case pool is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', 'gpu.large', pg_temp.digest('cert-x')),
  '{"reason": "pool", "status": "invalid"} and nothing changed', 'a pool with a dot is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', repeat('p', 65), pg_temp.digest('cert-x')),
  '{"reason": "pool", "status": "invalid"} and nothing changed', 'a 65-character pool is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', 'default', null),
  '{"reason": "cert_fingerprint", "status": "invalid"} and nothing changed',
  'a NULL fingerprint is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', 'default', substr(pg_temp.digest('cert-x'), 1, 31)),
  '{"reason": "cert_fingerprint", "status": "invalid"} and nothing changed',
  'a 31-byte fingerprint is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', 'default', pg_temp.digest('cert-x') || '\x00'::bytea),
  '{"reason": "cert_fingerprint", "status": "invalid"} and nothing changed',
  'a 33-byte fingerprint is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder', 'default', ''::bytea),
  '{"reason": "cert_fingerprint", "status": "invalid"} and nothing changed',
  'an empty fingerprint is invalid and nothing changes');

-- A name that reads as a uuid: ql_api.worker_status_set_v1 tries an id first, so it could never name its Worker.
select is(pg_temp.refused(gen_random_uuid(), '0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b', 'default', pg_temp.digest('cert-x')),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"} and nothing changed', 'a name that is a uuid is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), :'w2', 'default', pg_temp.digest('cert-x')),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"} and nothing changed', 'another Worker''s id as a name is invalid and nothing changes');

-- The same refusals for the enrolled Worker: no generation bump, its live session stays live.
select is(pg_temp.refused(:'w', null, 'we-new', pg_temp.digest('cert-z')),
  '{"reason": "name", "status": "invalid"} and nothing changed',
  're-enrolling with a NULL name is invalid and nothing changes');
select is(pg_temp.refused(:'w', upper(:'w'), 'we-new', pg_temp.digest('cert-z')),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"} and nothing changed',
  're-enrolling under its own id (in capitals) as its name is invalid and nothing changes');
select is(pg_temp.refused(:'w', 'urn:uuid:' || gen_random_uuid(), 'we-new', pg_temp.digest('cert-z')),
  '{"detail": "a name that reads as a uuid would be taken for an id", "reason": "name", "status": "invalid"} and nothing changed',
  're-enrolling under a uuid URN as its name is invalid and nothing changes');
select is(pg_temp.refused(:'w', 'builder-1b', 'We-New', pg_temp.digest('cert-z')),
  '{"reason": "pool", "status": "invalid"} and nothing changed',
  're-enrolling into an invalid pool is invalid and nothing changes');
select is(pg_temp.refused(:'w', 'builder-1b', 'we-new', substr(pg_temp.digest('cert-z'), 1, 16)),
  '{"reason": "cert_fingerprint", "status": "invalid"} and nothing changed',
  're-enrolling with a short fingerprint is invalid and nothing changes');
select is(array[pg_temp.worker_row(:'w', 'cert-c'), pg_temp.session_row(:'s4')],
  array['(builder-1b,we-new,4,active,t)', '(live,f)'],
  'after the refused re-enrolments the Worker is still generation 4 and its session still live');
-- Names are unique: another Worker's name is fenced name_taken, for a new id and for a re-enrolment.
select name as w2_name from ql.workers where id = :'w2' \gset
select is(pg_temp.refused(gen_random_uuid(), :'w2_name', 'default', pg_temp.digest('cert-y')),
  '{"reason": "name_taken", "status": "fenced"} and nothing changed',
  'enrolling a new Worker under another Worker''s name is fenced name_taken and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), 'builder-1b', 'we-new', pg_temp.digest('cert-c')),
  '{"reason": "name_taken", "status": "fenced"} and nothing changed',
  'a new id under W''s name is fenced name_taken (even with W''s certificate)');
select is(pg_temp.refused(:'w', :'w2_name', 'we-new', pg_temp.digest('cert-z')),
  '{"reason": "name_taken", "status": "fenced"} and nothing changed',
  're-enrolling W under another Worker''s name is fenced name_taken and nothing changes');
select is(array[pg_temp.worker_row(:'w', 'cert-c'), pg_temp.session_row(:'s4')],
  array['(builder-1b,we-new,4,active,t)', '(live,f)'],
  'after the name_taken refusal W is still generation 4 with its session live');
select is(ql_api.worker_enroll_v1(gen_random_uuid(), 'Builder-1b', 'we-new', pg_temp.digest('cert-f')) ->> 'status',
  'enrolled', 'names are exact: Builder-1b is another name');
select is(pg_temp.refused(gen_random_uuid(), '', 'BAD', null),
  '{"reason": "name", "status": "invalid"} and nothing changed',
  'with several bad arguments the first (name) is reported and nothing changes');

-- The whole file: every Worker has at most one live session, and every session of W before the last
-- re-enrolment is ended.
select is((select count(*)::int from (select s.worker_id from ql.worker_sessions s where s.status = 'live'
                                        group by s.worker_id having count(*) > 1) x), 0,
  'no Worker has two live sessions');
select is(array(select s.status::text || ':' || s.worker_generation from ql.worker_sessions s
                 where s.worker_id = :'w' order by 1),
  array['closed:1', 'closed:2', 'live:4', 'replaced:1'],
  'W''s sessions: one replaced and one closed of generation 1, one closed of generation 2, one live of generation 4');

select * from finish();
rollback;
