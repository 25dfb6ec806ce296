-- Tests ql_api.worker_session_open_v1: opened (first, replacing, bounds), invalid, not_found, fenced; structure and grants.
begin;
\ir ../fixtures.psql
select plan(57);

-- Structure: one SECURITY DEFINER function, executable by the runtime role and nobody else.
select has_function('ql_api', 'worker_session_open_v1', array['uuid', 'bigint', 'bytea', 'integer'],
  'worker_session_open_v1(uuid, bigint, bytea, integer) exists');
select is_definer('ql_api', 'worker_session_open_v1', array['uuid', 'bigint', 'bytea', 'integer'],
  'worker_session_open_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'worker_session_open_v1', array['uuid', 'bigint', 'bytea', 'integer'], 'jsonb',
  'worker_session_open_v1 returns a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p
           where p.oid = 'ql_api.worker_session_open_v1(uuid, bigint, bytea, integer)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'],
  'worker_session_open_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'worker_session_open_v1', array['uuid', 'bigint', 'bytea', 'integer'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute worker_session_open_v1');
select function_privs_are('ql_api', 'worker_session_open_v1', array['uuid', 'bigint', 'bytea', 'integer'],
  'public', array[]::text[], 'PUBLIC may not execute worker_session_open_v1');

-- Fixtures: a queued Run (so the stored state is never empty) and the Workers of every case.
select pg_temp.mk_project() as project \gset
select pg_temp.mk_revision(:'project', '{"argv": ["true"]}') as rev \gset
select pg_temp.mk_run(:'rev') as run \gset
select pg_temp.mk_worker() as w \gset
select pg_temp.mk_worker() as w_other \gset
select pg_temp.mk_worker() as w_disabled \gset
select pg_temp.mk_worker() as w_reenrolled \gset
select pg_temp.mk_worker() as w_max \gset
select session_ttl_ms as ttl from ql.settings \gset
select pg_temp.digest('cert-a') as cert \gset

set local role ql_runtime;
select pg_temp.open_session(:'w_other') as s_other \gset
select pg_temp.open_session(:'w_disabled') as s_disabled \gset
select pg_temp.open_session(:'w_reenrolled') as s_reenrolled_old \gset
reset role;
update ql.workers set status = 'disabled' where id = :'w_disabled';
update ql.workers set generation = 2 where id = :'w_reenrolled';
update ql.workers set generation = 9007199254740991 where id = :'w_max';

-- 1. The first session of a Worker.
select ql.now_ms() as t0 \gset
set local role ql_runtime;
select ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, 4) as opened1 \gset
reset role;
select ql.now_ms() as t1 \gset
select :'opened1'::jsonb ->> 'sessionId' as s1 \gset

select is(array(select k from jsonb_object_keys(:'opened1'::jsonb) k order by k),
  array['capacity', 'expiresAtMs', 'openedAtMs', 'replacedSessionId', 'sessionId', 'status', 'workerGeneration'],
  'an opened session answers exactly the documented keys');
select is(:'opened1'::jsonb,
  (select jsonb_build_object('status', 'opened', 'sessionId', s.id, 'workerGeneration', 1, 'capacity', 4,
                             'openedAtMs', s.opened_at_ms, 'expiresAtMs', s.expires_at_ms, 'replacedSessionId', null)
     from ql.worker_sessions s where s.worker_id = :'w'),
  'the first session is opened with its stored id, generation, capacity and times, replacing none');
select ok((:'opened1'::jsonb ->> 'openedAtMs')::bigint between :t0 and :t1,
  'the session opens at database time read during the call');
select is((:'opened1'::jsonb ->> 'expiresAtMs')::bigint - (:'opened1'::jsonb ->> 'openedAtMs')::bigint, :ttl::bigint,
  'the session lives for exactly the session TTL of ql.settings');
select results_eq(
  format('select s.worker_id, s.worker_generation, s.status, s.capacity, s.ended_at_ms::bigint
            from ql.worker_sessions s where s.id = %L', :'s1'),
  format('values (%L::uuid, 1::bigint, %L::text, 4, null::bigint)', :'w', 'live'),
  'the stored session is live, of generation 1, capacity 4, not ended');

-- 2. Opening again replaces the live session.
select s.id::text || ' ' || s::text as other_row from ql.worker_sessions s where s.id = :'s_other' \gset
set local role ql_runtime;
select ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, 8) as opened2 \gset
reset role;
select :'opened2'::jsonb ->> 'sessionId' as s2 \gset

select is(array[:'opened2'::jsonb ->> 'status', :'opened2'::jsonb ->> 'replacedSessionId'], array['opened', :'s1'],
  'a second open is opened and names the session it replaced');
select results_eq(
  format('select s.status, s.ended_at_ms::bigint from ql.worker_sessions s where s.id = %L', :'s1'),
  format('values (%L::text, %s::bigint)', 'replaced', (:'opened2'::jsonb ->> 'openedAtMs')),
  'the old session becomes replaced, ended at the new session''s open time');
select results_eq(
  format('select s.id from ql.worker_sessions s where s.worker_id = %L and s.status = %L', :'w', 'live'),
  format('values (%L::uuid)', :'s2'),
  'exactly one session of the worker is live: the new one');
select is((select s.id::text || ' ' || s::text from ql.worker_sessions s where s.id = :'s_other'), :'other_row',
  'another worker''s live session is untouched by the replacement');

-- 3. Bounds that are accepted: capacity 1 and 1024, the largest generation.
set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, 1) ->> 'capacity', '1',
  'capacity 1, the smallest, is accepted');
select is(ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, 1024) ->> 'capacity', '1024',
  'capacity 1024, the largest, is accepted');
select is(ql_api.worker_session_open_v1(:'w_max', 9007199254740991, :'cert'::bytea, 4) ->> 'workerGeneration',
  '9007199254740991', 'generation 2^53-1, the largest, is accepted');
reset role;
select is((select count(*)::int from ql.worker_sessions s where s.worker_id = :'w'), 4,
  'every open of the worker left one row: three replaced, one live');

-- 4. Invalid input: nothing is read or written (the live session of w is not replaced).
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.worker_session_open_v1(null, 1, :'cert'::bytea, 4),
  '{"status": "invalid", "reason": "worker_id"}'::jsonb, 'a missing worker id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing worker id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', null, :'cert'::bytea, 4),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'a missing generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 0, :'cert'::bytea, 4),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'generation 0 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', -1, :'cert'::bytea, 4),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'a negative generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a negative generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 9007199254740992, :'cert'::bytea, 4),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'generation 2^53 (not JSON-safe) is invalid');
reset role;
select is(pg_temp.state(), :'before', 'generation 2^53 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, null, 4),
  '{"status": "invalid", "reason": "cert_fingerprint"}'::jsonb, 'a missing certificate fingerprint is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing certificate fingerprint is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, ''::bytea, 4),
  '{"status": "invalid", "reason": "cert_fingerprint"}'::jsonb, 'an empty certificate fingerprint is invalid');
reset role;
select is(pg_temp.state(), :'before', 'an empty certificate fingerprint is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, substring(:'cert'::bytea from 1 for 31), 4),
  '{"status": "invalid", "reason": "cert_fingerprint"}'::jsonb, 'a 31-byte certificate fingerprint is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a 31-byte certificate fingerprint is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea || '\x00'::bytea, 4),
  '{"status": "invalid", "reason": "cert_fingerprint"}'::jsonb, 'a 33-byte certificate fingerprint is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a 33-byte certificate fingerprint is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, null),
  '{"status": "invalid", "reason": "capacity"}'::jsonb, 'a missing capacity is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing capacity is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, 0),
  '{"status": "invalid", "reason": "capacity"}'::jsonb, 'capacity 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'capacity 0 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, -1),
  '{"status": "invalid", "reason": "capacity"}'::jsonb, 'a negative capacity is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a negative capacity is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, :'cert'::bytea, 1025),
  '{"status": "invalid", "reason": "capacity"}'::jsonb, 'capacity 1025 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'capacity 1025 is invalid and nothing changes');

-- 5. not_found and fences.
set local role ql_runtime;
select is(ql_api.worker_session_open_v1(gen_random_uuid(), 1, :'cert'::bytea, 4),
  '{"status": "not_found", "reason": "worker"}'::jsonb, 'an unknown worker is not found');
reset role;
select is(pg_temp.state(), :'before', 'an unknown worker is not found and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w_disabled', 1, :'cert'::bytea, 4),
  '{"status": "fenced", "reason": "worker_disabled"}'::jsonb, 'a disabled worker is fenced');
reset role;
select is(pg_temp.state(), :'before', 'a disabled worker is fenced and nothing changes (its live session stays)');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w_reenrolled', 1, :'cert'::bytea, 4),
  '{"status": "fenced", "reason": "stale_generation"}'::jsonb, 'a re-enrolled worker''s old generation is fenced');
reset role;
select is(pg_temp.state(), :'before', 'an old generation is fenced and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w_reenrolled', 3, :'cert'::bytea, 4),
  '{"status": "fenced", "reason": "stale_generation"}'::jsonb, 'a generation newer than the enrolled one is fenced');
reset role;
select is(pg_temp.state(), :'before', 'a newer generation is fenced and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_open_v1(:'w', 1, pg_temp.digest('cert-b'), 4),
  '{"status": "fenced", "reason": "certificate_mismatch"}'::jsonb, 'a certificate other than the enrolled one is fenced');
reset role;
select is(pg_temp.state(), :'before', 'a certificate mismatch is fenced and nothing changes');

-- 6. The re-enrolled worker opens with its current generation and replaces its old-generation session.
set local role ql_runtime;
select ql_api.worker_session_open_v1(:'w_reenrolled', 2, :'cert'::bytea, 4) as opened_re \gset
reset role;
select is(array[:'opened_re'::jsonb ->> 'status', :'opened_re'::jsonb ->> 'workerGeneration',
                :'opened_re'::jsonb ->> 'replacedSessionId'],
  array['opened', '2', :'s_reenrolled_old'],
  'the current generation opens and replaces the old generation''s live session');
select results_eq(
  format('select s.worker_generation, s.status from ql.worker_sessions s where s.worker_id = %L order by s.worker_generation',
         :'w_reenrolled'),
  format('values (1::bigint, %L::text), (2::bigint, %L::text)', 'replaced', 'live'),
  'the worker keeps one live session, of the new generation');

select * from finish();
rollback;
