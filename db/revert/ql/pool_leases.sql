-- Revert qinglong:ql/pool_leases from pg: the per-pool lengths and the Leases' own lengths go (renewals then grant
-- ql.settings.lease_ttl_ms again).
begin;
set local role ql_owner;

alter table ql.run_leases drop column ttl_ms;
drop table ql.pool_settings;

commit;
