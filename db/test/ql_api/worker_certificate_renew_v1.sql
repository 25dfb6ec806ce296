-- Tests ql_api.worker_certificate_renew_v1 and what it changes at session open: a renewal makes the new certificate
-- current without a new generation, closes no session and fences no Attempt (a Lease renews through the same
-- session after it); both the new and the replaced certificate open sessions, an older one does not; the current
-- certificate again records its expiry only; a re-enrolment forgets the replaced certificate; invalid arguments and
-- an unknown Worker change nothing; only the owner (an operator as DBA) may call it; worker_list_v1 shows the expiry.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(36);

create function pg_temp.wstate() returns text language sql
return concat_ws(E'\n', pg_temp.state(), (select string_agg('worker ' || w::text, E'\n' order by w.id) from ql.workers w));

create function pg_temp.refused(p_worker uuid, p_fingerprint bytea, p_not_after bigint) returns text
language plpgsql as $$
declare
  v_before text := pg_temp.wstate();
  v_result jsonb := ql_api.worker_certificate_renew_v1(p_worker, p_fingerprint, p_not_after);
begin
  return v_result::text || case when pg_temp.wstate() is not distinct from v_before
                                then ' and nothing changed' else ' but the state changed' end;
end $$;

-- A session open's status (as the runtime role would call it) with certificate p_cert at generation p_gen.
create function pg_temp.opens(p_worker uuid, p_cert text, p_gen bigint default 1) returns text language sql
return ql_api.worker_session_open_v1(p_worker, p_gen, pg_temp.digest(p_cert), 4) ->> 'status';

select ql.now_ms() + 86400000 as day \gset

-- ---------------------------------------------------------------------------------------------
-- Structure: an operator's command, SECURITY DEFINER, executable by its owner only.
select has_function('ql_api', 'worker_certificate_renew_v1', array['uuid', 'bytea', 'bigint'],
  'worker_certificate_renew_v1(worker, certificate fingerprint, not after) exists');
select is_definer('ql_api', 'worker_certificate_renew_v1', array['uuid', 'bytea', 'bigint'],
  'worker_certificate_renew_v1 runs as its owner (SECURITY DEFINER)');
select is((select p.proconfig from pg_catalog.pg_proc p
            where p.oid = 'ql_api.worker_certificate_renew_v1(uuid, bytea, bigint)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'worker_certificate_renew_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'worker_certificate_renew_v1', array['uuid', 'bytea', 'bigint'], 'ql_owner',
  array['EXECUTE'], 'only its owner ql_owner (an operator acting as DBA) may renew a certificate');
select function_privs_are('ql_api', 'worker_certificate_renew_v1', array['uuid', 'bytea', 'bigint'], 'ql_runtime',
  array[]::text[], 'the runtime role (the shell) may not renew a certificate');
select function_privs_are('ql_api', 'worker_certificate_renew_v1', array['uuid', 'bytea', 'bigint'], 'ql_scheduler',
  array[]::text[], 'the scheduler role may not renew a certificate');
select function_privs_are('ql_api', 'worker_certificate_renew_v1', array['uuid', 'bytea', 'bigint'], 'public',
  array[]::text[], 'PUBLIC may not renew a certificate');

-- ---------------------------------------------------------------------------------------------
-- Setup: Worker W (certificate cert-a, generation 1) holding a running Attempt through session S.
select pg_temp.mk_project('wc-p') as p \gset
select pg_temp.mk_revision(:'p', '{"argv": ["true"]}') as rev \gset
select pg_temp.mk_run(:'rev') as run \gset
select pg_temp.mk_worker() as w \gset
set local role ql_runtime;
select pg_temp.offer_at(:'w') as o \gset
reset role;
select :'o'::jsonb ->> 'sessionId' as s \gset
set local role ql_runtime;
select is(pg_temp.lease(:'w', :'s', :'o'::jsonb, 1) ->> 'status', 'renewed', 'before: the Lease renews through S');
reset role;

-- 1. The current certificate again: its expiry is recorded, nothing else changes.
select (select (w.cert_fingerprint, w.generation, w.previous_cert_fingerprint)::text from ql.workers w where w.id = :'w')
  as before_row \gset
select is(ql_api.worker_certificate_renew_v1(:'w', pg_temp.digest('cert-a'), :day),
  jsonb_build_object('status', 'renewed', 'workerId', :'w'::uuid, 'generation', 1, 'certNotAfterMs', :day,
                     'previousAccepted', false),
  'the current certificate again records its expiry and answers renewed at the same generation');
select is((select (w.cert_fingerprint, w.generation, w.previous_cert_fingerprint)::text from ql.workers w where w.id = :'w'),
  :'before_row', 'recording the expiry changes neither the certificate, the generation nor the previous one');
select is((select w.cert_not_after_ms::bigint from ql.workers w where w.id = :'w'), :day::bigint, 'the expiry is stored');

-- 2. A renewal: cert-b current, cert-a previous, same generation; the session and the Lease go on.
select pg_temp.state() as before_runs \gset
select is(ql_api.worker_certificate_renew_v1(:'w', pg_temp.digest('cert-b'), :day + 1),
  jsonb_build_object('status', 'renewed', 'workerId', :'w'::uuid, 'generation', 1, 'certNotAfterMs', :day + 1,
                     'previousAccepted', true), 'a new certificate is renewed at the same generation');
select is(pg_temp.state(), :'before_runs', 'the renewal touches no Run, Attempt, Lease, offer, event or session');
select is((select (w.cert_fingerprint = pg_temp.digest('cert-b'), w.previous_cert_fingerprint = pg_temp.digest('cert-a'),
                   w.generation)::text from ql.workers w where w.id = :'w'), '(t,t,1)',
  'the Worker row holds cert-b as current and cert-a as previous, generation 1');
set local role ql_runtime;
select is(pg_temp.lease(:'w', :'s', :'o'::jsonb, 2) ->> 'status', 'renewed',
  'after the renewal the Lease still renews through the same session (nothing was fenced)');
select is(pg_temp.opens(:'w', 'cert-a'), 'opened', 'the replaced certificate still opens a session');
select is(pg_temp.opens(:'w', 'cert-b'), 'opened', 'the new certificate opens a session');
select is(pg_temp.opens(:'w', 'cert-z'), 'fenced', 'a certificate never recorded is fenced');
reset role;

-- 3. A second renewal: cert-c current, cert-b previous; cert-a no longer opens a session.
select is(ql_api.worker_certificate_renew_v1(:'w', pg_temp.digest('cert-c'), :day + 2) ->> 'status', 'renewed',
  'a second renewal is renewed');
set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, pg_temp.digest('cert-a'), 4),
  '{"status": "fenced", "reason": "certificate_mismatch"}',
  'two renewals later, the first certificate is fenced certificate_mismatch');
select is(pg_temp.opens(:'w', 'cert-b'), 'opened', 'the certificate the second renewal replaced opens a session');
select is(pg_temp.opens(:'w', 'cert-c'), 'opened', 'the current certificate opens a session');
reset role;

-- 4. worker_list_v1 shows the expiry.
select is((select x ->> 'certNotAfterMs' from jsonb_array_elements(ql_api.worker_list_v1() -> 'workers') x
            where x ->> 'workerId' = :'w'), (:day + 2)::text, 'worker_list_v1 shows the current certificate''s expiry');

-- The shell's /metrics reads the earliest expiry (no Worker named) as the runtime role.
select pg_temp.mk_worker('default', 'cert-other') as w_other \gset
set local role ql_runtime;
select is(ql_api.worker_certificate_expiry_v1(),
  jsonb_build_object('status', 'listed', 'earliestNotAfterMs', :day + 2, 'unrecorded', 1),
  'worker_certificate_expiry_v1: the earliest recorded expiry, and one active Worker without one');
reset role;
select ql_api.worker_certificate_renew_v1(:'w_other', pg_temp.digest('cert-other'), :day) as ignored \gset
update ql.workers set status = 'disabled' where id = :'w';
set local role ql_runtime;
select is(ql_api.worker_certificate_expiry_v1(),
  jsonb_build_object('status', 'listed', 'earliestNotAfterMs', :day, 'unrecorded', 0),
  'a disabled Worker''s certificate is not counted; the other one''s expiry is now the earliest');
reset role;
update ql.workers set status = 'active' where id = :'w';
select function_privs_are('ql_api', 'worker_certificate_expiry_v1', array[]::text[], 'ql_runtime', array['EXECUTE'],
  'the runtime role (the shell''s /metrics) may read the earliest expiry');

-- 5. A re-enrolment forgets the replaced certificate and the recorded expiry.
select is(ql_api.worker_enroll_v1(:'w', (select name from ql.workers where id = :'w'), 'default',
                                  pg_temp.digest('cert-d')) ->> 'generation', '2', 're-enrolment is generation 2');
select is((select (w.previous_cert_fingerprint is null, w.cert_not_after_ms is null)::text from ql.workers w
            where w.id = :'w'), '(t,t)', 're-enrolment clears the previous certificate and the expiry');
set local role ql_runtime;
select is(pg_temp.opens(:'w', 'cert-c', 2), 'fenced', 'after re-enrolment the last renewed certificate is fenced');
select is(pg_temp.opens(:'w', 'cert-d', 2), 'opened', 'the re-enrolled certificate opens a session');
reset role;

-- 6. Invalid arguments and an unknown Worker change nothing.
select is(pg_temp.refused(null, pg_temp.digest('x'), :day), '{"reason": "worker_id", "status": "invalid"} and nothing changed',
  'a NULL worker id is invalid and nothing changes');
select is(pg_temp.refused(:'w', null, :day), '{"reason": "cert_fingerprint", "status": "invalid"} and nothing changed',
  'a NULL fingerprint is invalid and nothing changes');
select is(pg_temp.refused(:'w', '\x00'::bytea, :day), '{"reason": "cert_fingerprint", "status": "invalid"} and nothing changed',
  'a fingerprint of one byte is invalid and nothing changes');
select is(pg_temp.refused(:'w', pg_temp.digest('x'), null), '{"reason": "not_after", "status": "invalid"} and nothing changed',
  'a NULL expiry is invalid and nothing changes');
select is(pg_temp.refused(:'w', pg_temp.digest('x'), ql.now_ms()), '{"reason": "not_after", "status": "invalid"} and nothing changed',
  'an expiry not ahead of database time is invalid and nothing changes');
select is(pg_temp.refused(gen_random_uuid(), pg_temp.digest('x'), :day), '{"reason": "worker", "status": "not_found"} and nothing changed',
  'an unknown Worker is not_found and nothing changes');

select * from finish();
rollback;
