-- Deploy qinglong:ql_api/run_timeline_v1 to pg
-- FROZEN COPY of db/functions/ql_api/run_timeline_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.run_timeline_v1: the read model of one Run and its events, for the CLI and the user API (run.read).
-- Lock order: none (one snapshot read).
create or replace function ql_api.run_timeline_v1(p_project_id uuid, p_run_id uuid)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The Run's current projection and its first 256 events in sequence order (a Run has a handful:
-- queued, starting, the ending pair; claims, running ACKs and renewals write none; retries add a few).
-- A Run of another Project and a missing Run are the same not_found.
declare
  v_run ql.runs;
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_run_id is null then return ql.outcome('invalid', 'run_id'); end if;
  select * into v_run from ql.runs r where r.id = p_run_id and r.project_id = p_project_id;
  if v_run.id is null then return ql.outcome('not_found', 'run'); end if;

  return jsonb_build_object(
    'status', 'found',
    'run', jsonb_build_object(
      'runId', v_run.id, 'projectId', v_run.project_id, 'taskId', v_run.task_id,
      'taskRevisionId', v_run.task_revision_id, 'status', v_run.status, 'version', v_run.version,
      'eventSequence', v_run.event_sequence, 'attemptCount', v_run.attempt_count,
      'cancelRequestedAtMs', v_run.cancel_requested_at_ms, 'cancelReason', v_run.cancel_reason,
      'createdAtMs', v_run.created_at_ms, 'endedAtMs', v_run.ended_at_ms),
    'events', coalesce((
      select jsonb_agg(jsonb_build_object(
               'sequence', e.sequence, 'type', e.type, 'actorKind', e.actor_kind, 'attemptId', e.attempt_id,
               'occurredAtMs', e.occurred_at_ms, 'payload', e.payload::text) order by e.sequence)
        from (select * from ql.run_events e where e.run_id = p_run_id order by e.sequence limit 256) e), '[]'),
    'truncated', v_run.event_sequence > 256);
end;
$$;

comment on function ql_api.run_timeline_v1(uuid, uuid) is
'Returns found {run, events (the first 256), truncated} | invalid | not_found (run, also another Project''s). '
'Raises nothing on input.';
grant execute on function ql_api.run_timeline_v1(uuid, uuid) to ql_runtime;

commit;
