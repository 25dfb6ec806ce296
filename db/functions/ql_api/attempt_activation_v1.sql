-- ql_api.attempt_activation_v1: the Worker's starting / running / start-failure ACK (qinglong/remote-run-activation@v1).
-- Lock order: ql.attempt_fence's (its header states it).
create or replace function ql_api.attempt_activation_v1(
  p_phase text,                -- 'starting' | 'running' | 'start_failure'
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  p_error_code text            -- start_failure only: why the process could not start
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- starting: the start barrier. Joins the exact Project/Task/revision/executor the Run pinned, reads
--   database time once and writes deadline_at_ms = now + plan.timeoutMs (NULL without a timeout) in
--   the same transaction as Attempt `starting` and Run `running`; the event carries the same deadline.
-- No start under an intent: a starting ACK (first or replayed) for a claimed|starting Attempt whose
--   Run carries a cancel intent ends the Attempt through ql.attempt_end (cancelled | timed_out) and
--   answers not_started: the Worker never spawns. The snapshot carries the intent either way.
-- Secrets: a starting ACK that applies chooses, for each secret the plan names, its current version, records them
--   (ql.attempt_secrets) and names them in the attempt.starting event ({name: version}); a named secret deleted
--   since the task was created ends the Attempt failed, secret_unavailable, and answers not_started. The answer
--   to that ACK, and to every replayed starting ACK of a starting|running Attempt, carries `secrets` when it has
--   any: the sealed versions it received (ql.attempt_secret_delivery), which the shell opens for the Worker; no
--   other answer does.
-- running: the process exists; the Attempt records it (running_at_ms) and the Run is not written: no event
--   (docs/decisions/0029). start_failure: the process could not be started; the Attempt ends
--   failed (or cancelled/timed_out under a cancel intent) through ql.attempt_end.
-- Replays answer already_starting | already_running | already_terminal with the exact snapshot;
-- an ACK out of order or after the Lease expired is fenced, and changes nothing.
declare
  f record;
  v_run ql.runs;
  v_attempt ql.run_attempts;
  v_lease ql.run_leases;
  v_plan jsonb;
  v_deadline bigint;
  v_names text[];
  v_versions jsonb;
begin
  if p_phase is null or p_phase not in ('starting', 'running', 'start_failure') then
    return ql.outcome('invalid', 'phase');
  end if;
  if (p_phase = 'start_failure') <> (p_error_code is not null)
     or (p_error_code is not null and p_error_code !~ '^[a-z0-9_.]{1,64}$') then
    return ql.outcome('invalid', 'error_code');
  end if;

  select * into f from ql.attempt_fence(p_worker_id, p_session_id, p_worker_generation, p_project_id,
                                        p_run_id, p_attempt_id, p_offer_id, p_lease_generation, p_token_digest);
  if f.outcome is not null then return f.outcome; end if;
  v_run := f.run; v_attempt := f.attempt; v_lease := f.lease;

  if v_attempt.status not in ('claimed', 'starting', 'running') then
    return jsonb_build_object('status', 'already_terminal', 'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease));
  end if;
  if v_lease.expires_at_ms <= f.now_ms then return ql.outcome('fenced', 'lease_expired'); end if;

  if p_phase = 'starting' and v_attempt.status in ('claimed', 'starting') and v_run.cancel_requested_at_ms is not null
     and (v_attempt.status = 'starting' or v_run.status = 'queued') then
    perform ql.attempt_end(v_run, v_attempt, null, 'start.cancelled', null, 'worker', p_worker_id, f.now_ms);
    select * into v_run from ql.runs r where r.id = p_run_id;
    select * into v_attempt from ql.run_attempts a where a.id = p_attempt_id;
    return jsonb_build_object('status', 'not_started', 'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease));
  end if;
  if (p_phase, v_attempt.status) in (('starting', 'starting'), ('starting', 'running')) then
    return jsonb_build_object('status', 'already_' || v_attempt.status,
                              'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease))
           || ql.attempt_secret_delivery(p_attempt_id);
  end if;
  if (p_phase, v_attempt.status) = ('running', 'running') then
    return jsonb_build_object('status', 'already_running', 'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease));
  end if;

  if p_phase = 'starting' and v_attempt.status = 'claimed' and v_run.status = 'queued' then
    select t.plan_json into v_plan
      from ql.task_execution_revisions t
      join ql.tasks k on k.id = t.task_id and k.project_id = t.project_id
      join ql.projects p on p.id = t.project_id
      join ql.executor_revisions e on e.id = t.executor_revision_id
     where t.id = v_run.task_revision_id and t.task_id = v_run.task_id and t.project_id = v_run.project_id;
    if not found then
      raise exception using errcode = 'QLBUG', message = 'attempt_activation_v1: pinned revision does not join';
    end if;
    v_names := ql.plan_secret_names(v_plan);
    if cardinality(v_names) > 0 then
      select jsonb_object_agg(s.name, s.current_version) into v_versions
        from (select s.name, s.current_version from ql.secrets s
               where s.project_id = v_run.project_id and s.name = any (v_names) and s.current_version > 0
               order by s.id for share) s;
      if v_versions is null or (select count(*) from jsonb_object_keys(v_versions)) < cardinality(v_names) then
        perform ql.attempt_end(v_run, v_attempt, null, 'secret_unavailable', null, 'worker', p_worker_id, f.now_ms);
        select * into v_run from ql.runs r where r.id = p_run_id;
        select * into v_attempt from ql.run_attempts a where a.id = p_attempt_id;
        return jsonb_build_object('status', 'not_started', 'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease));
      end if;
      insert into ql.attempt_secrets (attempt_id, secret_version_id)
      select p_attempt_id, v.id
        from ql.secrets s join ql.secret_versions v on v.secret_id = s.id and v.version = s.current_version
       where s.project_id = v_run.project_id and s.name = any (v_names);
    end if;
    v_deadline := f.now_ms + (v_plan ->> 'timeoutMs')::bigint;  -- NULL when the plan has no timeout
    update ql.run_attempts a
       set status = 'starting', version = a.version + 1, callback_sequence = a.callback_sequence + 1,
           deadline_at_ms = v_deadline, started_at_ms = f.now_ms
     where a.id = p_attempt_id;
    perform ql.run_event(p_run_id, 'running', 'attempt.starting', 'worker', p_worker_id, p_attempt_id,
                         jsonb_build_object('attemptNo', v_attempt.attempt_no, 'deadlineAtMs', v_deadline)
                           || case when v_versions is null then '{}' else jsonb_build_object('secrets', v_versions) end,
                         f.now_ms, 'attempt.starting:' || p_attempt_id::text);
  elsif p_phase = 'running' and v_attempt.status = 'starting' then
    update ql.run_attempts a
       set status = 'running', version = a.version + 1, callback_sequence = a.callback_sequence + 1,
           running_at_ms = f.now_ms
     where a.id = p_attempt_id;
  elsif p_phase = 'start_failure' and v_attempt.status in ('claimed', 'starting') then
    perform ql.attempt_end(v_run, v_attempt, null, p_error_code, null, 'worker', p_worker_id, f.now_ms);
  else
    -- running before starting, start failure after running, or a claim whose Run is no longer queued.
    return ql.outcome('fenced', 'state_drift');
  end if;

  select * into v_run from ql.runs r where r.id = p_run_id;
  select * into v_attempt from ql.run_attempts a where a.id = p_attempt_id;
  return jsonb_build_object('status', 'applied', 'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease))
         || case when cardinality(v_names) > 0 then ql.attempt_secret_delivery(p_attempt_id) else '{}' end;
end;
$$;

comment on function ql_api.attempt_activation_v1(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text) is
'Returns applied | not_started | already_starting | already_running | already_terminal, each with the exact '
'snapshot, and secrets when a starting ACK (first or replayed) has sealed versions to deliver '
'| invalid | not_found | fenced (ql.attempt_fence reasons, lease_expired, state_drift). Raises QLBUG only when '
'the pinned revision does not join (corruption).';
grant execute on function ql_api.attempt_activation_v1(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text) to ql_runtime;
