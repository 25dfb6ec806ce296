-- Deploy qinglong:ql/attempt_snapshot to pg
-- FROZEN COPY of db/functions/ql/attempt_snapshot.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.attempt_snapshot: the exact activation snapshot of one Attempt (qinglong/remote-run-activation@v1).
create or replace function ql.attempt_snapshot(p_run ql.runs, p_attempt ql.run_attempts, p_lease ql.run_leases)
returns jsonb
language plpgsql
stable
as $$
-- Bounded: identities, statuses, versions, times, the Run's cancel intent (time and reason, or
-- nulls), the executor and at most one artifact per kind.
-- Never contains the lease token or its digest.
-- PL/pgSQL, not SQL: its one statement is planned once per session and the plan is cached (a SQL function
-- with composite arguments called from PL/pgSQL is not inlined and was planned again on every call).
begin
  return pg_catalog.jsonb_build_object(
  'projectId', (p_run).project_id,
  'runId', (p_run).id,
  'attemptId', (p_attempt).id,
  'offerId', (p_attempt).offer_id,
  'attemptNo', (p_attempt).attempt_no,
  'runStatus', (p_run).status,
  'attemptStatus', (p_attempt).status,
  'attemptVersion', (p_attempt).version,
  'leaseGeneration', (p_lease).lease_generation,
  'leaseVersion', (p_lease).version,
  'leaseExpiresAtMs', (p_lease).expires_at_ms,
  'callbackSequence', (p_attempt).callback_sequence,
  'deadlineAtMs', (p_attempt).deadline_at_ms,
  'startedAtMs', (p_attempt).started_at_ms,
  'runningAtMs', (p_attempt).running_at_ms,
  'endedAtMs', (p_attempt).ended_at_ms,
  'exitCode', (p_attempt).exit_code,
  'errorCode', (p_attempt).error_code,
  'cancelRequestedAtMs', (p_run).cancel_requested_at_ms,
  'cancelReason', (p_run).cancel_reason,
  'executor', (select pg_catalog.jsonb_build_object('kind', e.kind, 'version', e.version)
               from ql.task_execution_revisions t
               join ql.executor_revisions e on e.id = t.executor_revision_id
               where t.id = (p_run).task_revision_id),
  'artifacts', coalesce((select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                  'artifactId', a.id, 'kind', a.kind,
                                  'sha256', pg_catalog.encode(a.sha256, 'hex'), 'size', a.size) order by a.kind)
                         from ql.artifacts a where a.attempt_id = (p_attempt).id), '[]'));
end;
$$;

comment on function ql.attempt_snapshot(ql.runs, ql.run_attempts, ql.run_leases) is
'Returns the activation snapshot (the wire''s activation contract), never the lease token or its digest. Never '
'raises.';

commit;
