-- Each pool its own Lease length (docs/decisions/0028-lease-length-per-pool.md): ql.pool_settings holds the pools
-- whose Lease length an operator set (ql_api.pool_lease_set_v1); a pool without a row takes ql.settings.lease_ttl_ms.
-- A task revision may override both with its plan's leaseMs. The length is resolved once, when the pull claims an
-- Attempt (ql.lease_ttl_ms), and kept on its Lease (run_leases.ttl_ms): every renewal grants it, so a change of the
-- pool's length applies to the Attempts claimed after it, and a renewal reads nothing more than it did.
-- The invalid reason lease_ms (a length out of 1000..3600000) is appended to ql.invalid_reason (whose order
-- qinglong.wire.errors.INVALID_REASONS mirrors); nothing here uses it (a value added in a transaction cannot be used
-- before it commits). A revert cannot drop it: a redeploy adds it `if not exists`.
begin;
set local role ql_owner;

alter type ql.invalid_reason add value if not exists 'lease_ms';

create table ql.pool_settings (
  pool text primary key check (pool ~ '^[a-z0-9_-]{1,64}$'),
  lease_ttl_ms bigint not null check (lease_ttl_ms between 1000 and 3600000),
  updated_at_ms ql.ms not null
);
comment on table ql.pool_settings is
'Per pool, the tunables an operator set for it (ql_api.pool_lease_set_v1); a pool without a row takes ql.settings.';
comment on column ql.pool_settings.lease_ttl_ms is
'The Lease length of the pool''s Attempts (a plan''s leaseMs overrides it): how long a Worker may go without the '
'control plane before it stops the task, and how long a dead Worker''s Runs wait before recovery.';

alter table ql.run_leases
  add column ttl_ms bigint check (ttl_ms between 1000 and 3600000);
comment on column ql.run_leases.ttl_ms is
'What every renewal of this Lease grants, resolved by the pull (ql.lease_ttl_ms); NULL on Leases from before it '
'was kept: ql.settings.lease_ttl_ms.';

commit;
