-- Verify qinglong:ql/bundles on pg
select bundle_max_bytes from ql.settings where false;
select digest, size_bytes, chunk_count, entries, complete, created_at_ms from ql.bundles where false;
select digest, idx, data from ql.bundle_chunks where false;
select plan_signature from ql.task_execution_revisions where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and indexname = 'task_execution_revisions_bundle_idx';
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype
  and e.enumlabel in ('digest', 'size_bytes', 'index', 'data', 'entries', 'plan_signature', 'revision_id')
having pg_catalog.count(*) = 7;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.not_found_reason'::regtype and e.enumlabel in ('bundle', 'chunk', 'revision')
having pg_catalog.count(*) = 3;
