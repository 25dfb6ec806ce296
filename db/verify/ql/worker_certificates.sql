-- Verify qinglong:ql/worker_certificates on pg
select cert_not_after_ms, previous_cert_fingerprint from ql.workers where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel = 'not_after';
