-- Verify qinglong:ql/secrets on pg
select id, project_id, name, current_version, created_at_ms, updated_at_ms from ql.secrets where false;
select id, secret_id, version, size, kek_id, wrapped_key, nonce, ciphertext, created_by, created_at_ms,
       destroyed_at_ms
  from ql.secret_versions where false;
select attempt_id, secret_version_id from ql.attempt_secrets where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.invalid_reason'::regtype and e.enumlabel in ('version_id', 'sealed')
having pg_catalog.count(*) = 2;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.not_found_reason'::regtype and e.enumlabel = 'secret';
