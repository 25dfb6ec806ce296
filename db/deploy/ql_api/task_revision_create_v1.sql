-- Deploy qinglong:ql_api/task_revision_create_v1 to pg
-- FROZEN COPY of db/functions/ql_api/task_revision_create_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.task_revision_create_v1: a user creates a task, or gives it a new revision, through the user API.
-- Lock order: project (FOR SHARE, ql.task_write_fence) → advisory lock on (subject, mutationId) →
--   ql_api.task_create_v1's: project (FOR SHARE, already held) → the secrets the plan names (FOR SHARE) → the bundle
--   it names (FOR KEY SHARE) → task (FOR NO KEY UPDATE) → mutation row (insert).
create or replace function ql_api.task_revision_create_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_name text,
  p_plan jsonb,
  p_plan_signature jsonb,
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
-- The admitted policy (task.write: owner, admin) is re-verified first; then the revision is made exactly as an
-- operator's `task create` makes it (ql_api.task_create_v1: the plan's checks, its secrets and bundle, a new immutable
-- revision that becomes current). p_plan_signature is NULL (unsigned) or an operator's signature the client made (the
-- CLI's `--sign`): the database stores it and never judges it; a Worker that requires signed plans refuses an
-- unsigned one at its start (decision 0017). Idempotent by (subject, mutationId): the same command (Project, name,
-- plan, signature) replays its first answer with the status `already_made`; another command under a used mutationId
-- is fenced. A refusal (invalid, not_found) records no mutation, so a corrected retry may reuse the id.
declare
  v_fence jsonb;
  v_digest bytea;
  v_mutation ql.mutations;
  v_result jsonb;
begin
  if p_mutation_id is null or p_mutation_id !~ '^[A-Za-z0-9._:-]{1,128}$' then
    return ql.outcome('invalid', 'mutation_id');
  end if;
  v_fence := ql.task_write_fence(p_subject_id, p_project_id, p_admitted_project_version, p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;

  perform pg_advisory_xact_lock(hashtextextended('ql.mutation:' || p_subject_id::text || ':' || p_mutation_id, 0));
  v_digest := sha256(convert_to(concat_ws(':', 'task.revise', p_project_id::text, p_name, p_plan::text,
                                          coalesce(p_plan_signature::text, 'unsigned')), 'UTF8'));
  select * into v_mutation from ql.mutations m where m.subject_id = p_subject_id and m.mutation_id = p_mutation_id;
  if v_mutation.subject_id is not null then
    if v_mutation.command_digest <> v_digest then return ql.outcome('fenced', 'mutation_conflict'); end if;
    return v_mutation.result || '{"status": "already_made"}';
  end if;

  v_result := ql_api.task_create_v1(p_project_id, p_name, p_plan, p_plan_signature);
  if v_result ->> 'status' not in ('created', 'revised') then return v_result; end if;
  v_result := v_result || jsonb_build_object('name', p_name, 'signed', p_plan_signature is not null);
  insert into ql.mutations (subject_id, mutation_id, command_digest, result, created_at_ms)
  values (p_subject_id, p_mutation_id, v_digest, v_result, ql.now_ms());
  return v_result;
end;
$$;

comment on function ql_api.task_revision_create_v1(uuid, uuid, text, jsonb, jsonb, text, bigint, bigint) is
'Returns created | revised | already_made {taskId, revisionId, name, signed} | invalid (subject_id, project_id, '
'mutation_id, admitted_version, and task_create_v1''s: name, plan, plan_signature) | not_found (project, secret, '
'bundle) | fenced (ql.policy_fence reasons, mutation_conflict). Raises nothing on input.';
grant execute on function ql_api.task_revision_create_v1(uuid, uuid, text, jsonb, jsonb, text, bigint, bigint) to ql_runtime;

commit;
