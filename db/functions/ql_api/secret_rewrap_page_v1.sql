-- ql_api.secret_rewrap_page_v1: a page of sealed secret versions whose data key another key-encryption key wrapped.
create or replace function ql_api.secret_rewrap_page_v1(p_kek_id text, p_limit integer, p_after uuid default null)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- A rotation (docs/decisions/0015-secrets.md): a shell whose current key-encryption key is p_kek_id reads the wrapped
-- data keys still under another one, rewraps each and writes it back (ql_api.secret_rewrap_v1). The wrapped keys are
-- of no use without the old key-encryption key, which only the shell holds; no value is read. Reads only
-- (a rotation reads the table once). Pages by version id, after p_after (the last id of the previous page): a
-- version the shell cannot rewrap (its key is not held there) stays under its key and must not hold up the rest.
begin
  if p_kek_id is null or p_kek_id !~ '^[A-Za-z0-9_-]{12}$' then return ql.outcome('invalid', 'sealed'); end if;
  if p_limit is null or p_limit not between 1 and 1000 then return ql.outcome('invalid', 'limit'); end if;
  return jsonb_build_object('status', 'listed', 'versions',
    (select coalesce(jsonb_agg(jsonb_build_object(
              'versionId', v.id, 'projectId', s.project_id, 'name', s.name, 'kekId', v.kek_id,
              'wrappedKey', translate(encode(v.wrapped_key, 'base64'), E'\n', '')) order by v.id), '[]'::jsonb)
       from (select * from ql.secret_versions v
              where v.destroyed_at_ms is null and v.kek_id <> p_kek_id and (p_after is null or v.id > p_after)
              order by v.id limit p_limit) v
       join ql.secrets s on s.id = v.secret_id));
end;
$$;

comment on function ql_api.secret_rewrap_page_v1(text, integer, uuid) is
'Returns listed {versions: [{versionId, projectId, name, kekId, wrappedKey}]} (at most p_limit, by version id after '
'p_after when given; [] when none is left) | invalid (sealed, limit). Raises nothing on input.';
grant execute on function ql_api.secret_rewrap_page_v1(text, integer, uuid) to ql_runtime;
