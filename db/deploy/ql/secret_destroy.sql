-- Deploy qinglong:ql/secret_destroy to pg
-- FROZEN COPY of db/functions/ql/secret_destroy.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.secret_destroy: empty the sealed columns of a secret's versions that no live Attempt holds.
-- Lock order: the caller holds the secret's row (FOR NO KEY UPDATE); the versions are updated, Attempts read.
create or replace function ql.secret_destroy(p_secret_id uuid, p_keep_version integer, p_now_ms bigint)
returns integer
language plpgsql
volatile
as $$
-- p_keep_version: the version to keep (the current one), or 0 to destroy every version (a delete), held or not:
-- a deleted secret is gone from storage at once, and an Attempt that already received it keeps what it has.
-- Otherwise a version a claimed|starting|running Attempt received stays until a later call finds it unheld.
declare
  v_count integer;
begin
  update ql.secret_versions v
     set kek_id = null, wrapped_key = null, nonce = null, ciphertext = null, destroyed_at_ms = p_now_ms
   where v.secret_id = p_secret_id and v.destroyed_at_ms is null and v.version <> p_keep_version
     and (p_keep_version = 0 or not exists (
           select 1 from ql.attempt_secrets h join ql.run_attempts a on a.id = h.attempt_id
            where h.secret_version_id = v.id and a.status in ('claimed', 'starting', 'running')));
  get diagnostics v_count = row_count;
  return v_count;
end;
$$;

comment on function ql.secret_destroy(uuid, integer, bigint) is
'Returns how many versions it destroyed. Raises nothing.';

commit;
