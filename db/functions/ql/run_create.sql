-- ql.run_create: queue a new Run of a task at the given revision, with its run.queued event.
create or replace function ql.run_create(
  p_run_id uuid,
  p_revision ql.task_execution_revisions,
  p_actor_kind ql.actor_kind,
  p_actor_id uuid,
  p_payload jsonb,   -- the event's payload beside taskId and taskRevisionId
  p_now_ms bigint
)
returns void
language plpgsql
volatile
as $$
begin
  insert into ql.runs (id, project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms)
  values (p_run_id, p_revision.project_id, p_revision.task_id, p_revision.id,
          coalesce(p_revision.plan_json ->> 'pool', 'default'), 'created', p_now_ms, p_now_ms);
  perform ql.run_event(p_run_id, 'queued', 'run.queued', p_actor_kind, p_actor_id, null,
                       pg_catalog.jsonb_build_object('taskId', p_revision.task_id, 'taskRevisionId', p_revision.id)
                       || p_payload,
                       p_now_ms, 'run.queued:' || p_run_id::text);
end;
$$;

comment on function ql.run_create(uuid, ql.task_execution_revisions, ql.actor_kind, uuid, jsonb, bigint) is
'Returns nothing. Raises unique_violation when p_run_id exists, and the errors of the ql.runs constraints and '
'ql.run_event on a caller bug.';
