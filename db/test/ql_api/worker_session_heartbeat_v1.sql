-- Tests ql_api.worker_session_heartbeat_v1: alive extends the session TTL; invalid; every session fence; structure and grants.
begin;
\ir ../fixtures.psql
select plan(37);

-- Structure: one SECURITY DEFINER function, executable by the runtime role and nobody else.
select has_function('ql_api', 'worker_session_heartbeat_v1', array['uuid', 'uuid', 'bigint'],
  'worker_session_heartbeat_v1(uuid, uuid, bigint) exists');
select is_definer('ql_api', 'worker_session_heartbeat_v1', array['uuid', 'uuid', 'bigint'],
  'worker_session_heartbeat_v1 runs as its owner (SECURITY DEFINER)');
select function_returns('ql_api', 'worker_session_heartbeat_v1', array['uuid', 'uuid', 'bigint'], 'jsonb',
  'worker_session_heartbeat_v1 returns a typed jsonb result');
select is((select p.proconfig from pg_catalog.pg_proc p
           where p.oid = 'ql_api.worker_session_heartbeat_v1(uuid, uuid, bigint)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'],
  'worker_session_heartbeat_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'worker_session_heartbeat_v1', array['uuid', 'uuid', 'bigint'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute worker_session_heartbeat_v1');
select function_privs_are('ql_api', 'worker_session_heartbeat_v1', array['uuid', 'uuid', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute worker_session_heartbeat_v1');

-- Fixtures: a queued Run (so the stored state is never empty), workers and their sessions.
select pg_temp.mk_project() as project \gset
select pg_temp.mk_revision(:'project', '{"argv": ["true"]}') as rev \gset
select pg_temp.mk_run(:'rev') as run \gset
select pg_temp.mk_worker() as w \gset
select pg_temp.mk_worker() as w2 \gset
select pg_temp.mk_worker() as w3 \gset
select session_ttl_ms as ttl from ql.settings \gset

set local role ql_runtime;
select pg_temp.open_session(:'w') as s \gset
select pg_temp.open_session(:'w2') as s2 \gset
select pg_temp.open_session(:'w3') as s3 \gset
reset role;

-- 1. alive: a live session is extended to database time + session TTL.
update ql.worker_sessions set expires_at_ms = ql.now_ms() + 1000 where id = :'s';
select expires_at_ms as old_expires,
       row(worker_id, worker_generation, status, capacity, opened_at_ms, ended_at_ms)::text as s_rest
  from ql.worker_sessions where id = :'s' \gset
select s::text as s2_row from ql.worker_sessions s where s.id = :'s2' \gset
select ql.now_ms() as t0 \gset
set local role ql_runtime;
select ql_api.worker_session_heartbeat_v1(:'w', :'s', 1) as alive \gset
reset role;
select ql.now_ms() as t1 \gset

select is(array(select k from jsonb_object_keys(:'alive'::jsonb) k order by k),
  array['expiresAtMs', 'sessionId', 'status'], 'alive answers exactly the documented keys');
select is(array[:'alive'::jsonb ->> 'status', :'alive'::jsonb ->> 'sessionId'], array['alive', :'s'],
  'a live session of the worker is alive');
select ok((:'alive'::jsonb ->> 'expiresAtMs')::bigint between :t0 + :ttl and :t1 + :ttl,
  'the new expiry is database time + the session TTL');
select is((select expires_at_ms::bigint from ql.worker_sessions where id = :'s'), (:'alive'::jsonb ->> 'expiresAtMs')::bigint,
  'the stored expiry is the answered one');
select ok((select expires_at_ms from ql.worker_sessions where id = :'s') > :old_expires,
  'the heartbeat extends the session past its old expiry');
select is((select row(worker_id, worker_generation, status, capacity, opened_at_ms, ended_at_ms)::text
             from ql.worker_sessions where id = :'s'), :'s_rest',
  'the heartbeat changes nothing but the expiry (still live, same generation, capacity, open time)');
select is((select s::text from ql.worker_sessions s where s.id = :'s2'), :'s2_row',
  'another worker''s session is untouched');

-- 2. Invalid input.
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(null, :'s', 1),
  '{"status": "invalid", "reason": "worker_id"}'::jsonb, 'a missing worker id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing worker id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', null, 1),
  '{"status": "invalid", "reason": "session_id"}'::jsonb, 'a missing session id is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing session id is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s', null),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'a missing generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a missing generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s', 0),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'generation 0 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'generation 0 is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s', -1),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'a negative generation is invalid');
reset role;
select is(pg_temp.state(), :'before', 'a negative generation is invalid and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s', 9007199254740992),
  '{"status": "invalid", "reason": "worker_generation"}'::jsonb, 'generation 2^53 is invalid');
reset role;
select is(pg_temp.state(), :'before', 'generation 2^53 is invalid and nothing changes');

-- 3. stale_session: unknown, another worker's, replaced, closed.
set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', gen_random_uuid(), 1),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb, 'an unknown session is stale');
reset role;
select is(pg_temp.state(), :'before', 'an unknown session is stale and nothing changes');

set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s2', 1),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb, 'another worker''s session is stale for this worker');
reset role;
select is(pg_temp.state(), :'before', 'another worker''s session is stale and nothing changes');

set local role ql_runtime;
select pg_temp.open_session(:'w') as s_new \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s', 1),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb, 'a replaced session is stale');
reset role;
select is(pg_temp.state(), :'before', 'a replaced session is stale and nothing changes (it is not revived)');

update ql.worker_sessions set status = 'closed', ended_at_ms = ql.now_ms() where id = :'s3';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w3', :'s3', 1),
  '{"status": "fenced", "reason": "stale_session"}'::jsonb, 'a closed session is stale');
reset role;
select is(pg_temp.state(), :'before', 'a closed session is stale and nothing changes');

-- 4. stale_generation: the session was opened under generation 1.
set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s_new', 2),
  '{"status": "fenced", "reason": "stale_generation"}'::jsonb, 'a generation other than the session''s is fenced');
reset role;
select is(pg_temp.state(), :'before', 'a stale generation is fenced and nothing changes');

-- 5. session_expired: a live session whose expiry passed cannot be revived by a heartbeat.
update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1 where id = :'s_new';
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(ql_api.worker_session_heartbeat_v1(:'w', :'s_new', 1),
  '{"status": "fenced", "reason": "session_expired"}'::jsonb, 'a live session past its expiry is expired');
reset role;
select is(pg_temp.state(), :'before', 'an expired session is fenced and nothing changes');

select * from finish();
rollback;
