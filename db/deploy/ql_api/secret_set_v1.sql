-- Deploy qinglong:ql_api/secret_set_v1 to pg
-- FROZEN COPY of db/functions/ql_api/secret_set_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.secret_set_v1: give a Project's secret a new immutable version, sealed by the shell.
-- Lock order: project (FOR SHARE, ql.policy_fence) → advisory lock on (subject, mutationId) → secret (FOR NO KEY
--   UPDATE, inserted first when new) → its versions → mutation row (insert).
create or replace function ql_api.secret_set_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_name text,
  p_version_id uuid,
  p_size integer,
  p_kek_id text,
  p_wrapped_key bytea,
  p_nonce bytea,
  p_ciphertext bytea,
  p_mutation_id text,
  p_admitted_project_version bigint,
  p_admitted_binding_version bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The value never reaches this function: the shell sealed it under a fresh data key with the Project, the name and
-- p_version_id in its associated data, and wrapped the data key with its key-encryption key p_kek_id. The admitted
-- policy (secret.write) is re-verified first. Idempotent by (subject, mutationId): the same command (Project, name,
-- size) replays already_set with the first answer; another command under a used mutationId is fenced. The new
-- version becomes current, and every earlier version no live Attempt holds is destroyed (ql.secret_destroy).
declare
  v_fence jsonb;
  v_digest bytea;
  v_mutation ql.mutations;
  v_secret ql.secrets;
  v_version integer;
  v_now bigint;
  v_result jsonb;
begin
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[A-Z_][A-Z0-9_]{0,63}$' then return ql.outcome('invalid', 'name'); end if;
  if p_version_id is null then return ql.outcome('invalid', 'version_id'); end if;
  if p_size is null or p_size not between 1 and 65536 then return ql.outcome('invalid', 'size'); end if;
  if p_kek_id is null or p_kek_id !~ '^[A-Za-z0-9_-]{12}$' or octet_length(p_wrapped_key) is distinct from 60
     or octet_length(p_nonce) is distinct from 12 or octet_length(p_ciphertext) is distinct from p_size + 16 then
    return ql.outcome('invalid', 'sealed');
  end if;
  if p_mutation_id is null or p_mutation_id !~ '^[A-Za-z0-9._:-]{1,128}$' then
    return ql.outcome('invalid', 'mutation_id');
  end if;
  if p_admitted_project_version is null or p_admitted_binding_version is null then
    return ql.outcome('invalid', 'admitted_version');
  end if;

  v_fence := ql.policy_fence(p_subject_id, p_project_id, 'secret.write', p_admitted_project_version,
                             p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;

  perform pg_advisory_xact_lock(hashtextextended('ql.mutation:' || p_subject_id::text || ':' || p_mutation_id, 0));
  v_digest := sha256(convert_to('secret.set:' || p_project_id::text || ':' || p_name || ':' || p_size::text, 'UTF8'));
  select * into v_mutation from ql.mutations m where m.subject_id = p_subject_id and m.mutation_id = p_mutation_id;
  if v_mutation.subject_id is not null then
    if v_mutation.command_digest <> v_digest then return ql.outcome('fenced', 'mutation_conflict'); end if;
    return v_mutation.result || '{"status": "already_set"}';
  end if;
  if exists (select 1 from ql.secret_versions v where v.id = p_version_id) then
    return ql.outcome('invalid', 'version_id');
  end if;

  v_now := ql.now_ms();
  insert into ql.secrets (project_id, name, created_at_ms, updated_at_ms)
  values (p_project_id, p_name, v_now, v_now)
  on conflict (project_id, name) do nothing;
  select * into strict v_secret from ql.secrets s where s.project_id = p_project_id and s.name = p_name
     for no key update;
  select coalesce(max(v.version), 0) + 1 into v_version from ql.secret_versions v where v.secret_id = v_secret.id;
  insert into ql.secret_versions (id, secret_id, version, size, kek_id, wrapped_key, nonce, ciphertext, created_by,
                                  created_at_ms)
  values (p_version_id, v_secret.id, v_version, p_size, p_kek_id, p_wrapped_key, p_nonce, p_ciphertext,
          p_subject_id, v_now);
  update ql.secrets s set current_version = v_version, updated_at_ms = v_now where s.id = v_secret.id;
  perform ql.secret_destroy(v_secret.id, v_version, v_now);

  v_result := jsonb_build_object('status', 'set', 'name', p_name, 'version', v_version, 'size', p_size,
                                 'setAtMs', v_now);
  insert into ql.mutations (subject_id, mutation_id, command_digest, result, created_at_ms)
  values (p_subject_id, p_mutation_id, v_digest, v_result, v_now);
  return v_result;
end;
$$;

comment on function ql_api.secret_set_v1(uuid, uuid, text, uuid, integer, text, bytea, bytea, bytea, text, bigint, bigint) is
'Returns set | already_set {name, version, size, setAtMs} | invalid (subject_id, project_id, name, version_id, '
'size, sealed, mutation_id, admitted_version) | not_found (project) | fenced (ql.policy_fence reasons, '
'mutation_conflict). Raises nothing on input.';
grant execute on function ql_api.secret_set_v1(uuid, uuid, text, uuid, integer, text, bytea, bytea, bytea, text, bigint, bigint) to ql_runtime;

commit;
