-- Deploy qinglong:ql_api/subject_create_v1 to pg
-- FROZEN COPY of db/functions/ql_api/subject_create_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.subject_create_v1: register a user API subject by the SHA-256 of its bearer token.
create or replace function ql_api.subject_create_v1(p_kind text, p_name text, p_token_digest bytea)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The token itself never reaches the database.
-- The SHA-256 of the empty token is refused (empty_token): the shell admits a request that carries no
-- bearer token with exactly that digest, so a subject holding it would be anyone without credentials.
-- Names are unique (ql/unique_names): a name another subject holds is fenced name_taken, a digest another
-- subject holds token_in_use (checked first), and nothing changes. A concurrent create of the same name or
-- digest waits for the other transaction and then answers the same way (ON CONFLICT DO NOTHING).
declare
  v_id uuid;
begin
  if p_kind is null or p_kind not in ('user', 'agent', 'system') then return ql.outcome('invalid', 'kind'); end if;
  if p_name is null or length(p_name) not between 1 and 200 then return ql.outcome('invalid', 'name'); end if;
  if ql.name_is_uuid(p_name) then
    return ql.outcome('invalid', 'name') || jsonb_build_object('detail', 'a name that reads as a uuid would be taken for an id');
  end if;
  if p_token_digest is null or octet_length(p_token_digest) <> 32 then return ql.outcome('invalid', 'token_digest'); end if;
  if p_token_digest = sha256(''::bytea) then return ql.outcome('invalid', 'empty_token'); end if;
  insert into ql.subjects (kind, name, token_digest) values (p_kind, p_name, p_token_digest)
  on conflict do nothing returning id into v_id;
  if v_id is null and exists (select 1 from ql.subjects s where s.token_digest = p_token_digest) then
    return ql.outcome('fenced', 'token_in_use');
  end if;
  if v_id is null then return ql.outcome('fenced', 'name_taken'); end if;
  return jsonb_build_object('status', 'created', 'subjectId', v_id);
end;
$$;

comment on function ql_api.subject_create_v1(text, text, bytea) is
'Returns created {subjectId} | invalid (kind, name, token_digest, empty_token; a name that reads as a uuid, '
'ql.name_is_uuid, with a detail) | fenced (token_in_use, name_taken). Raises nothing on input.';

commit;
