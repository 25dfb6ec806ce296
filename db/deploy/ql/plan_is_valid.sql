-- Deploy qinglong:ql/plan_is_valid to pg
-- FROZEN COPY of db/functions/ql/plan_is_valid.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.plan_is_valid: the shape of a task revision's plan_json, used by its CHECK constraint.
create or replace function ql.plan_is_valid(p_plan jsonb)
returns boolean
language sql
immutable
strict
parallel safe
-- argv: non-empty array of 1..256 strings; env: object of strings (optional); timeoutMs: integer
-- 1..2^31-1 or absent (no timeout); maxAttempts: integer 1..100 (default 1); retryBackoffMs:
-- integer 0..2^31-1 (default 0); pool: 1..64 chars [a-z0-9_-] (default "default"); cwd: 1..4096
-- chars (optional; the Worker decides where it points); user, group: names [a-z_][a-z0-9_-]{0,31}
-- (optional; the Worker decides whether it may switch to them); secretEnv: object of 1..16 environment names
-- ([A-Za-z_][A-Za-z0-9_]{0,127}, none also in env) to secret names ([A-Z_][A-Z0-9_]{0,63}); secretFiles: object
-- of 1..16 relative paths (segments of [A-Za-z0-9._-], not . or .., at most 255 chars) to secret names
-- (docs/decisions/0015-secrets.md); at most 16 distinct secret names in all; bundle: the SHA-256 of an archive of
-- scripts, 64 lowercase hex (optional; task_create_v1 requires it stored, ql.bundles); leaseMs: integer
-- 1000..3600000, the Lease length of the task's Attempts (optional; else its pool's, ql.lease_ttl_ms). No other keys.
return coalesce(pg_catalog.jsonb_typeof(p_plan) = 'object'
  and (select coalesce(pg_catalog.bool_and(k in ('argv', 'env', 'timeoutMs', 'maxAttempts', 'retryBackoffMs', 'pool', 'cwd', 'user',
                                              'group', 'secretEnv', 'secretFiles', 'bundle', 'leaseMs')), true)
       from pg_catalog.jsonb_object_keys(p_plan) as k)
  and pg_catalog.jsonb_typeof(p_plan -> 'argv') = 'array'
  and pg_catalog.jsonb_array_length(p_plan -> 'argv') between 1 and 256
  and (select pg_catalog.bool_and(pg_catalog.jsonb_typeof(a) = 'string')
       from pg_catalog.jsonb_array_elements(p_plan -> 'argv') as a)
  and (not p_plan ? 'env' or (
        pg_catalog.jsonb_typeof(p_plan -> 'env') = 'object'
        and coalesce((select pg_catalog.bool_and(pg_catalog.jsonb_typeof(v) = 'string')
                      from pg_catalog.jsonb_each(p_plan -> 'env') as e(k, v)), true)))
  and (not p_plan ? 'timeoutMs' or (
        pg_catalog.jsonb_typeof(p_plan -> 'timeoutMs') = 'number'
        and (p_plan ->> 'timeoutMs') ~ '^[0-9]{1,10}$'
        and (p_plan ->> 'timeoutMs')::bigint between 1 and 2147483647))
  and (not p_plan ? 'leaseMs' or (
        pg_catalog.jsonb_typeof(p_plan -> 'leaseMs') = 'number'
        and (p_plan ->> 'leaseMs') ~ '^[0-9]{1,7}$'
        and (p_plan ->> 'leaseMs')::bigint between 1000 and 3600000))
  and (not p_plan ? 'maxAttempts' or (
        pg_catalog.jsonb_typeof(p_plan -> 'maxAttempts') = 'number'
        and (p_plan ->> 'maxAttempts') ~ '^[0-9]{1,3}$'
        and (p_plan ->> 'maxAttempts')::int between 1 and 100))
  and (not p_plan ? 'retryBackoffMs' or (
        pg_catalog.jsonb_typeof(p_plan -> 'retryBackoffMs') = 'number'
        and (p_plan ->> 'retryBackoffMs') ~ '^[0-9]{1,10}$'
        and (p_plan ->> 'retryBackoffMs')::bigint between 0 and 2147483647))
  and (not p_plan ? 'pool' or (
        pg_catalog.jsonb_typeof(p_plan -> 'pool') = 'string'
        and (p_plan ->> 'pool') ~ '^[a-z0-9_-]{1,64}$'))
  and (not p_plan ? 'cwd' or (
        pg_catalog.jsonb_typeof(p_plan -> 'cwd') = 'string'
        and pg_catalog.char_length(p_plan ->> 'cwd') between 1 and 4096))
  and (not p_plan ? 'user' or (
        pg_catalog.jsonb_typeof(p_plan -> 'user') = 'string'
        and (p_plan ->> 'user') ~ '^[a-z_][a-z0-9_-]{0,31}$'))
  and (not p_plan ? 'group' or (
        pg_catalog.jsonb_typeof(p_plan -> 'group') = 'string'
        and (p_plan ->> 'group') ~ '^[a-z_][a-z0-9_-]{0,31}$'))
  and (not p_plan ? 'secretEnv' or (
        pg_catalog.jsonb_typeof(p_plan -> 'secretEnv') = 'object'
        and (select pg_catalog.count(*) between 1 and 16
                    and pg_catalog.bool_and(pg_catalog.jsonb_typeof(e.v) = 'string'
                                            and e.k ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'
                                            and (e.v #>> '{}') ~ '^[A-Z_][A-Z0-9_]{0,63}$'
                                            and not coalesce(p_plan -> 'env' ? e.k, false))
               from pg_catalog.jsonb_each(p_plan -> 'secretEnv') as e(k, v))))
  and (not p_plan ? 'secretFiles' or (
        pg_catalog.jsonb_typeof(p_plan -> 'secretFiles') = 'object'
        and (select pg_catalog.count(*) between 1 and 16
                    and pg_catalog.bool_and(pg_catalog.jsonb_typeof(f.v) = 'string'
                                            and pg_catalog.char_length(f.k) <= 255
                                            and f.k ~ '^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$'
                                            and f.k !~ '(^|/)\.{1,2}(/|$)'
                                            and (f.v #>> '{}') ~ '^[A-Z_][A-Z0-9_]{0,63}$')
               from pg_catalog.jsonb_each(p_plan -> 'secretFiles') as f(k, v))))
  and pg_catalog.cardinality(ql.plan_secret_names(p_plan)) <= 16
  and (not p_plan ? 'bundle' or (
        pg_catalog.jsonb_typeof(p_plan -> 'bundle') = 'string'
        and (p_plan ->> 'bundle') ~ '^[0-9a-f]{64}$')), false);

comment on function ql.plan_is_valid(jsonb) is
'Returns true when the plan has exactly the documented shape, else false (never NULL, which a CHECK would let '
'pass). Never raises.';

commit;
