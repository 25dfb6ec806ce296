-- Deploy qinglong:ql_api/secret_rewrap_v1 to pg
-- FROZEN COPY of db/functions/ql_api/secret_rewrap_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.secret_rewrap_v1: replace a secret version's wrapped data key by the same key wrapped under another KEK.
-- Lock order: the version's row (UPDATE).
create or replace function ql_api.secret_rewrap_v1(
  p_version_id uuid,
  p_from_kek_id text,
  p_kek_id text,
  p_wrapped_key bytea
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Compare-and-set on the key id: the write applies only while the version is still sealed under p_from_kek_id, so two
-- shells rewrapping at once, or a delete in between, leave one consistent row (unchanged for the other). The
-- ciphertext and nonce of the value are not touched: the data key is the same.
begin
  if p_version_id is null then return ql.outcome('invalid', 'version_id'); end if;
  if p_from_kek_id is null or p_from_kek_id !~ '^[A-Za-z0-9_-]{12}$' or p_kek_id is null
     or p_kek_id !~ '^[A-Za-z0-9_-]{12}$' or p_kek_id = p_from_kek_id or octet_length(p_wrapped_key) is distinct from 60 then
    return ql.outcome('invalid', 'sealed');
  end if;
  update ql.secret_versions v set kek_id = p_kek_id, wrapped_key = p_wrapped_key
   where v.id = p_version_id and v.kek_id = p_from_kek_id and v.destroyed_at_ms is null;
  if found then return '{"status": "rewrapped"}'::jsonb; end if;
  if not exists (select 1 from ql.secret_versions v where v.id = p_version_id) then
    return ql.outcome('not_found', 'secret');
  end if;
  return '{"status": "unchanged"}'::jsonb;
end;
$$;

comment on function ql_api.secret_rewrap_v1(uuid, text, text, bytea) is
'Returns rewrapped | unchanged (no longer under p_from_kek_id, or destroyed) | invalid (version_id, sealed) | '
'not_found (secret). Raises nothing on input.';
grant execute on function ql_api.secret_rewrap_v1(uuid, text, text, bytea) to ql_runtime;

commit;
