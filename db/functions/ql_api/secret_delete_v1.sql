-- ql_api.secret_delete_v1: delete a Project's secret: no later starting ACK receives it, and its sealed bytes go.
-- Lock order: project (FOR SHARE, ql.policy_fence) → advisory lock on (subject, mutationId) → secret (FOR NO KEY
--   UPDATE) → its versions → mutation row (insert).
create or replace function ql_api.secret_delete_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_name text,
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
-- Every version is destroyed at once, even one a live Attempt received (it keeps what its Worker holds); the rows
-- stay as the history of who received which version. A task whose plan names the secret is not changed: its next
-- Attempt ends at the starting ACK with the start failure secret_unavailable, nothing spawned. Deleting a secret
-- that is already deleted answers already_deleted. Idempotent by (subject, mutationId), as ql_api.secret_set_v1.
declare
  v_fence jsonb;
  v_digest bytea;
  v_mutation ql.mutations;
  v_secret ql.secrets;
  v_now bigint;
  v_result jsonb;
begin
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[A-Z_][A-Z0-9_]{0,63}$' then return ql.outcome('invalid', 'name'); end if;
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
  v_digest := sha256(convert_to('secret.delete:' || p_project_id::text || ':' || p_name, 'UTF8'));
  select * into v_mutation from ql.mutations m where m.subject_id = p_subject_id and m.mutation_id = p_mutation_id;
  if v_mutation.subject_id is not null then
    if v_mutation.command_digest <> v_digest then return ql.outcome('fenced', 'mutation_conflict'); end if;
    return v_mutation.result;
  end if;

  select * into v_secret from ql.secrets s where s.project_id = p_project_id and s.name = p_name for no key update;
  if v_secret.id is null then return ql.outcome('not_found', 'secret'); end if;
  v_now := ql.now_ms();
  if v_secret.current_version = 0 then
    v_result := jsonb_build_object('status', 'already_deleted', 'name', p_name);
  else
    update ql.secrets s set current_version = 0, updated_at_ms = v_now where s.id = v_secret.id;
    perform ql.secret_destroy(v_secret.id, 0, v_now);
    v_result := jsonb_build_object('status', 'deleted', 'name', p_name);
  end if;
  insert into ql.mutations (subject_id, mutation_id, command_digest, result, created_at_ms)
  values (p_subject_id, p_mutation_id, v_digest, v_result, v_now);
  return v_result;
end;
$$;

comment on function ql_api.secret_delete_v1(uuid, uuid, text, text, bigint, bigint) is
'Returns deleted | already_deleted {name} | invalid (subject_id, project_id, name, mutation_id, admitted_version) '
'| not_found (project, secret) | fenced (ql.policy_fence reasons, mutation_conflict). Raises nothing on input.';
grant execute on function ql_api.secret_delete_v1(uuid, uuid, text, text, bigint, bigint) to ql_runtime;
