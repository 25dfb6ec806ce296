-- Deploy qinglong:ql_api/subject_create_v1 to pg
-- FROZEN COPY of db/functions/ql_api/subject_create_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.subject_create_v1: register a user, agent or system subject by the SHA-256 of its bearer token.
-- The token itself never reaches the database. Not granted to ql_runtime (operators call it as a DBA).
-- Returns {"status":"created","subjectId"} | {"status":"invalid","reason"} | {"status":"fenced","reason":"token_in_use"}.
-- signature: ql_api.subject_create_v1(text, text, bytea)
create or replace function ql_api.subject_create_v1(p_kind text, p_name text, p_token_digest bytea)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_id uuid;
begin
  if p_kind is null or p_kind not in ('user', 'agent', 'system') then return ql.outcome('invalid', 'kind'); end if;
  if p_name is null or length(p_name) not between 1 and 200 then return ql.outcome('invalid', 'name'); end if;
  if p_token_digest is null or octet_length(p_token_digest) <> 32 then return ql.outcome('invalid', 'token_digest'); end if;
  insert into ql.subjects (kind, name, token_digest) values (p_kind, p_name, p_token_digest)
  on conflict (token_digest) do nothing returning id into v_id;
  if v_id is null then return ql.outcome('fenced', 'token_in_use'); end if;
  return jsonb_build_object('status', 'created', 'subjectId', v_id);
end;
$$;

comment on function ql_api.subject_create_v1(text, text, bytea) is
'Registers a subject by its bearer-token digest. Results: created | invalid (kind, name, token_digest) | fenced (token_in_use).';
revoke all on function ql_api.subject_create_v1(text, text, bytea) from public;

commit;
