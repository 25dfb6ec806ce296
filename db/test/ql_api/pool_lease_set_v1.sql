-- Tests the Lease length per pool (docs/decisions/0028-lease-length-per-pool.md): ql_api.pool_lease_set_v1 sets and
-- clears a pool's length, refuses out-of-range lengths and bad names without changing anything, and only an
-- operator may call it; the pull resolves an Attempt's length (the plan's leaseMs, else the pool's, else the global
-- one) onto its Lease and offers the shorter of the offer TTL and it; every renewal (fast path, full path) grants it;
-- a change of the pool's length applies to Attempts claimed after it; ql_api.pool_list_v1 lists the pools.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(31);

create function pg_temp.pools() returns text language sql
return coalesce((select string_agg(p::text, E'\n' order by p.pool) from ql.pool_settings p), '');
-- The Lease an offer o got: its length (ttl_ms) and expiry - renewal time.
create function pg_temp.granted(o jsonb) returns bigint language sql
return (select l.expires_at_ms - l.renewed_at_ms from ql.run_leases l where l.attempt_id = (o->>'attemptId')::uuid);
create function pg_temp.ttl(o jsonb) returns bigint language sql
return (select l.ttl_ms from ql.run_leases l where l.attempt_id = (o->>'attemptId')::uuid);

-- Structure: an operator's command, executable by its owner only; the list too.
select is_definer('ql_api', 'pool_lease_set_v1', array['text', 'bigint'], 'pool_lease_set_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'pool_lease_set_v1', array['text', 'bigint'], 'ql_runtime', array[]::text[],
  'the runtime role (the shell) may not set a pool''s Lease length');
select function_privs_are('ql_api', 'pool_list_v1', array[]::text[], 'ql_runtime', array[]::text[],
  'the runtime role may not list pools');

update ql.settings set lease_ttl_ms = 30000, offer_ttl_ms = 30000;

-- Refusals change nothing.
select ql_api.pool_lease_set_v1('edge', 300000) ->> 'status' as first \gset
select is(:'first'::text, 'set', 'a pool''s Lease length is set');
select pg_temp.pools() as before \gset
select is(ql_api.pool_lease_set_v1('edge', 999), '{"status": "invalid", "reason": "lease_ms", "detail": "a Lease length is 1000 to 3600000 ms"}',
  'a length below 1000 ms is invalid (lease_ms)');
select is(ql_api.pool_lease_set_v1('edge', 3600001) ->> 'reason', 'lease_ms', 'a length above an hour is invalid (lease_ms)');
select is(ql_api.pool_lease_set_v1('edge', -5) ->> 'reason', 'lease_ms', 'a negative length is invalid (lease_ms)');
select is(ql_api.pool_lease_set_v1('Edge', 60000), '{"status": "invalid", "reason": "pool"}', 'a pool name out of [a-z0-9_-] is invalid');
select is(ql_api.pool_lease_set_v1(null, 60000), '{"status": "invalid", "reason": "pool"}', 'a NULL pool is invalid');
select is(ql_api.pool_lease_set_v1(repeat('a', 65), 60000) ->> 'reason', 'pool', 'a 65-character pool name is invalid');
select is(pg_temp.pools(), :'before', 'the refused calls change nothing');
set local role ql_runtime;
select throws_ok($$select ql_api.pool_lease_set_v1('edge', 60000)$$, '42501',
  'permission denied for function pool_lease_set_v1', 'the runtime role calling it is refused: 42501');
reset role;
select is(pg_temp.pools(), :'before', 'the refused call of the runtime role changes nothing');

-- Set, the same again (unchanged), the bounds themselves, clear.
select is(ql_api.pool_lease_set_v1('edge', 300000) - 'status',
  '{"pool": "edge", "leaseMs": 300000, "poolOwn": true, "changed": false}', 'setting the length it has changes nothing');
select is(ql_api.pool_lease_set_v1('tiny', 1000) ->> 'leaseMs', '1000', '1000 ms is accepted');
select is(ql_api.pool_lease_set_v1('tiny', 3600000) ->> 'changed', 'true', 'an hour is accepted, a change');
select is(ql_api.pool_lease_set_v1('tiny', null), '{"status": "cleared", "pool": "tiny", "leaseMs": 30000, "poolOwn": false, "changed": true}',
  'clearing answers the global length now in force');
select is((select count(*) from ql.pool_settings where pool = 'tiny'), 0::bigint, 'a cleared pool has no row');

-- The pull and the renewals of an edge pool: a 5-minute Lease, the first one as long as the offer TTL allows.
select pg_temp.mk_worker('edge') as edge \gset
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "pool": "edge"}')) as edge_run \gset
select pg_temp.offer_at(:'edge', 'running') as eo \gset
select is(pg_temp.ttl(:'eo'), 300000::bigint, 'the pull keeps the pool''s length on the Lease');
select is((:'eo'::jsonb ->> 'leaseExpiresAtMs')::bigint - (:'eo'::jsonb ->> 'offeredAtMs')::bigint, 30000::bigint,
  'the first Lease (the offer) is the shorter of the offer TTL and the pool''s length');
set local role ql_runtime;
select pg_temp.lease(:'edge', (:'eo'::jsonb ->> 'sessionId')::uuid, :'eo'::jsonb, 1) as r1 \gset
reset role;
select is((:'r1'::jsonb ->> 'expiresAtMs')::bigint - (:'r1'::jsonb ->> 'renewedAtMs')::bigint, 300000::bigint,
  'a renewal (fast path) grants the pool''s 5 minutes');
-- The full path (a deadline passed, no intent yet: the renewal writes the timeout intent) grants it too.
update ql.run_attempts set deadline_at_ms = ql.now_ms() - 1 where id = (:'eo'::jsonb ->> 'attemptId')::uuid;
set local role ql_runtime;
select pg_temp.lease(:'edge', (:'eo'::jsonb ->> 'sessionId')::uuid, :'eo'::jsonb, 2) as r2 \gset
reset role;
select is(:'r2'::jsonb ->> 'status', 'stop_requested', 'the full path answered (the deadline passed)');
select is((:'r2'::jsonb ->> 'expiresAtMs')::bigint - (:'r2'::jsonb ->> 'renewedAtMs')::bigint, 300000::bigint,
  'a renewal on the full path grants the pool''s 5 minutes too');

-- A change of the pool's length applies to Attempts claimed after it; a running one keeps its own.
select ql_api.pool_lease_set_v1('edge', 60000) ->> 'status' as changed \gset
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "pool": "edge"}')) as edge_run2 \gset
set local role ql_runtime;
select pg_temp.pull(:'edge', (:'eo'::jsonb ->> 'sessionId')::uuid, 'token-b') as eo2 \gset
reset role;
select is(pg_temp.ttl(:'eo2'), 60000::bigint, 'an Attempt claimed after the change gets the new length');
select is(pg_temp.ttl(:'eo'), 300000::bigint, 'the Attempt claimed before it keeps its own');

-- A cluster pool of 5 s: its first Lease is 5 s too (a dead Worker's offer is given up soon).
select ql_api.pool_lease_set_v1('cluster', 5000) ->> 'status' as cl \gset
select pg_temp.mk_worker('cluster') as cw \gset
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "pool": "cluster"}')) as cl_run \gset
select pg_temp.offer_at(:'cw', 'claimed') as co \gset
select is((:'co'::jsonb ->> 'leaseExpiresAtMs')::bigint - (:'co'::jsonb ->> 'offeredAtMs')::bigint, 5000::bigint,
  'a 5 s pool''s first Lease is 5 s (shorter than the offer TTL)');
set local role ql_runtime;
select pg_temp.lease(:'cw', (:'co'::jsonb ->> 'sessionId')::uuid, :'co'::jsonb, 1) as cr \gset
reset role;
select is((:'cr'::jsonb ->> 'expiresAtMs')::bigint - (:'cr'::jsonb ->> 'renewedAtMs')::bigint, 5000::bigint,
  'its renewal grants 5 s');

-- A plan's leaseMs overrides the pool's; a pool without its own takes the global length.
select pg_temp.mk_scenario('{"argv": ["true"], "leaseMs": 120000}') as pw \gset
select pg_temp.offer_at(:'pw', 'running') as po \gset
set local role ql_runtime;
select pg_temp.lease(:'pw', (:'po'::jsonb ->> 'sessionId')::uuid, :'po'::jsonb, 1) as pr \gset
reset role;
select is((:'pr'::jsonb ->> 'expiresAtMs')::bigint - (:'pr'::jsonb ->> 'renewedAtMs')::bigint, 120000::bigint,
  'a plan''s leaseMs is what its renewals grant');
select pg_temp.mk_scenario() as gw \gset
select pg_temp.offer_at(:'gw', 'running') as go \gset
select is(pg_temp.ttl(:'go'), 30000::bigint, 'a pool without its own length takes ql.settings.lease_ttl_ms');
select ok(not ql.plan_is_valid('{"argv": ["true"], "leaseMs": 999}') and not ql.plan_is_valid('{"argv": ["true"], "leaseMs": 3600001}')
  and not ql.plan_is_valid('{"argv": ["true"], "leaseMs": "60000"}') and ql.plan_is_valid('{"argv": ["true"], "leaseMs": 1000}'),
  'a plan''s leaseMs is an integer of 1000..3600000');

-- The list: every pool a Worker or a setting names, with the length in force.
select is((select jsonb_agg(p - 'liveRuns' order by p ->> 'pool') from jsonb_array_elements(ql_api.pool_list_v1() -> 'pools') p
            where p ->> 'pool' in ('cluster', 'edge', 'tiny')),
  '[{"pool": "cluster", "leaseMs": 5000, "poolOwn": true, "workers": 1}, {"pool": "edge", "leaseMs": 60000, "poolOwn": true, "workers": 1}]'::jsonb,
  'the list shows the pools of Workers and settings with their lengths (a cleared pool with no Worker is gone)');

select * from finish();
rollback;
