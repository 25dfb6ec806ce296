-- ql_api.run_enqueue_v1: queue a Run of a task, pinned to the task's current execution revision.
-- Lock order: project (FOR SHARE, ql.policy_fence) → advisory lock on (subject, mutationId), so two concurrent first
--   calls of one mutation queue one Run → task (FOR SHARE) → mutation row (insert).
create or replace function ql_api.run_enqueue_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_task_id uuid,
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
-- Idempotent by (subject, mutationId): the same command replays already_enqueued with the same Run;
-- another command under a used mutationId is fenced. The admitted policy is re-verified first.
-- A disabled task (ql_api.task_status_set_v1) is fenced (task_disabled) and nothing changes.
declare
  v_fence jsonb;
  v_task ql.tasks;
  v_digest bytea;
  v_mutation ql.mutations;
  v_revision ql.task_execution_revisions;
  v_run_id uuid;
  v_now bigint;
  v_result jsonb;
begin
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_task_id is null then return ql.outcome('invalid', 'task_id'); end if;
  if p_mutation_id is null or p_mutation_id !~ '^[A-Za-z0-9._:-]{1,128}$' then
    return ql.outcome('invalid', 'mutation_id');
  end if;
  if p_admitted_project_version is null or p_admitted_binding_version is null then
    return ql.outcome('invalid', 'admitted_version');
  end if;

  v_fence := ql.policy_fence(p_subject_id, p_project_id, 'run.start', p_admitted_project_version,
                             p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;

  perform pg_advisory_xact_lock(hashtextextended('ql.mutation:' || p_subject_id::text || ':' || p_mutation_id, 0));
  v_digest := sha256(convert_to('run.enqueue:' || p_project_id::text || ':' || p_task_id::text, 'UTF8'));
  select * into v_mutation from ql.mutations m where m.subject_id = p_subject_id and m.mutation_id = p_mutation_id;
  if v_mutation.subject_id is not null then
    if v_mutation.command_digest <> v_digest then return ql.outcome('fenced', 'mutation_conflict'); end if;
    return v_mutation.result || '{"status": "already_enqueued"}';
  end if;

  select * into v_task from ql.tasks t where t.id = p_task_id and t.project_id = p_project_id for share;
  if v_task.id is null or v_task.current_revision_id is null then return ql.outcome('not_found', 'task'); end if;
  if v_task.status <> 'active' then return ql.outcome('fenced', 'task_disabled'); end if;
  select * into strict v_revision from ql.task_execution_revisions r where r.id = v_task.current_revision_id;

  v_now := ql.now_ms();
  v_run_id := gen_random_uuid();
  perform ql.run_create(v_run_id, v_revision, (select s.kind from ql.subjects s where s.id = p_subject_id),
                        p_subject_id, jsonb_build_object('mutationId', p_mutation_id), v_now);

  v_result := jsonb_build_object('status', 'enqueued', 'runId', v_run_id, 'taskRevisionId', v_revision.id,
                                 'queuedAtMs', v_now);
  insert into ql.mutations (subject_id, mutation_id, command_digest, result, created_at_ms)
  values (p_subject_id, p_mutation_id, v_digest, v_result, v_now);
  return v_result;
end;
$$;

comment on function ql_api.run_enqueue_v1(uuid, uuid, uuid, text, bigint, bigint) is
'Returns enqueued | already_enqueued {runId, taskRevisionId, queuedAtMs} | invalid | not_found (project, task) '
'| fenced (ql.policy_fence reasons, mutation_conflict, task_disabled). Raises nothing on input.';
grant execute on function ql_api.run_enqueue_v1(uuid, uuid, uuid, text, bigint, bigint) to ql_runtime;
