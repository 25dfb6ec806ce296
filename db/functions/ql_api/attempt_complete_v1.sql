-- ql_api.attempt_complete_v1: complete a started Attempt with its exit and artifact receipts (qinglong/remote-run-completion@v1).
-- Lock order: ql.attempt_fence's (its header states it).
create or replace function ql_api.attempt_complete_v1(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  p_lease_version bigint,
  p_exit_code integer,          -- NULL when the process left no exit code (killed, never started)
  p_error_code text,            -- NULL on a normal exit
  p_artifacts jsonb             -- [{"artifactId": uuid, "sha256": hex, "size": int}], at most one per kind
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Fenced like lease control and by the LATEST Lease version (the Worker persists every renewal
-- before acting, so its completion carries the newest one). The receipts must name exactly the
-- Attempt's stored artifacts. ql.attempt_end decides the outcome: a cancel intent gives
-- cancelled|timed_out, else exit 0 succeeds, else failed (or a retry). An exact replay of the
-- accepted completion answers already_completed; any other completion of an ended Attempt is fenced.
declare
  f record;
  v_run ql.runs;
  v_attempt ql.run_attempts;
  v_lease ql.run_leases;
  v_receipts_ok boolean;
  v_digest bytea;
begin
  if p_lease_version is null or p_lease_version not between 1 and ql.max_safe_integer() then
    return ql.outcome('invalid', 'lease_version');
  end if;
  if p_exit_code is not null and p_exit_code not between 0 and 255 then
    return ql.outcome('invalid', 'exit_code');
  end if;
  if (p_error_code is not null and p_error_code !~ '^[a-z0-9_.]{1,64}$') or (p_exit_code is null and p_error_code is null) then
    return ql.outcome('invalid', 'error_code');
  end if;
  if p_artifacts is null or jsonb_typeof(p_artifacts) <> 'array' or jsonb_array_length(p_artifacts) > 2
     or exists (select 1 from jsonb_array_elements(p_artifacts) r
                where jsonb_typeof(r) <> 'object'
                   or (select array_agg(k order by k) from jsonb_object_keys(r) k) <> array['artifactId', 'sha256', 'size']
                   or jsonb_typeof(r -> 'artifactId') <> 'string'
                   or (r ->> 'artifactId') !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                   or jsonb_typeof(r -> 'sha256') <> 'string' or (r ->> 'sha256') !~ '^[0-9a-f]{64}$'
                   or jsonb_typeof(r -> 'size') <> 'number' or (r ->> 'size') !~ '^[0-9]{1,9}$') then
    return ql.outcome('invalid', 'artifacts');
  end if;
  v_digest := sha256(convert_to(jsonb_build_object(
    'leaseVersion', p_lease_version, 'exitCode', p_exit_code, 'errorCode', p_error_code,
    'artifacts', (select coalesce(jsonb_agg(r order by r ->> 'artifactId'), '[]') from jsonb_array_elements(p_artifacts) r)
  )::text, 'UTF8'));

  select * into f from ql.attempt_fence(p_worker_id, p_session_id, p_worker_generation, p_project_id,
                                        p_run_id, p_attempt_id, p_offer_id, p_lease_generation, p_token_digest);
  if f.outcome is not null then return f.outcome; end if;
  v_run := f.run; v_attempt := f.attempt; v_lease := f.lease;

  if v_attempt.status not in ('claimed', 'starting', 'running') then
    if v_attempt.completion_digest = v_digest then
      return jsonb_build_object('status', 'already_completed', 'runStatus', v_run.status,
                                'attemptStatus', v_attempt.status,
                                'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease));
    end if;
    return jsonb_build_object('status', 'fenced', 'reason',
      case when v_attempt.completion_digest is null then 'state_drift' else 'completion_conflict' end);
  end if;
  if v_attempt.status = 'claimed' then return ql.outcome('fenced', 'state_drift'); end if;
  if v_lease.version <> p_lease_version then return ql.outcome('fenced', 'stale_version'); end if;
  if v_lease.expires_at_ms <= f.now_ms then return ql.outcome('fenced', 'lease_expired'); end if;

  select count(distinct a.id) = jsonb_array_length(p_artifacts)
         and count(distinct a.id) = (select count(*) from ql.artifacts a2 where a2.attempt_id = p_attempt_id)
    into v_receipts_ok
    from jsonb_array_elements(p_artifacts) r
    join ql.artifacts a on a.id = (r ->> 'artifactId')::uuid and a.attempt_id = p_attempt_id
                       and encode(a.sha256, 'hex') = r ->> 'sha256' and a.size = (r ->> 'size')::int;
  if not v_receipts_ok then return ql.outcome('fenced', 'artifact_mismatch'); end if;

  perform ql.attempt_end(v_run, v_attempt, p_exit_code, p_error_code, v_digest, 'worker', p_worker_id, f.now_ms);

  select * into v_run from ql.runs r where r.id = p_run_id;
  select * into v_attempt from ql.run_attempts a where a.id = p_attempt_id;
  return jsonb_build_object('status', 'completed', 'runStatus', v_run.status, 'attemptStatus', v_attempt.status,
                            'snapshot', ql.attempt_snapshot(v_run, v_attempt, v_lease));
end;
$$;

comment on function ql_api.attempt_complete_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, integer, text, jsonb) is
'Returns completed | already_completed {runStatus, attemptStatus, snapshot} | invalid (lease_version, '
'exit_code, error_code, artifacts, the fence''s inputs) | not_found | fenced (ql.attempt_fence reasons, '
'state_drift, completion_conflict, stale_version, lease_expired, artifact_mismatch). Raises nothing on input.';
grant execute on function ql_api.attempt_complete_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, bigint, integer, text, jsonb) to ql_runtime;
