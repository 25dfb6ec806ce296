-- Verify qinglong:ql/pool_leases on pg
select pool, lease_ttl_ms, updated_at_ms from ql.pool_settings where false;
select ttl_ms from ql.run_leases where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel = 'lease_ms';
