-- ql_api.run_cancel_request_v1: a user's cancellation of a Run, under an in-transaction policy fence (decision 0000 (ADR-0118 §6)).
-- Lock order: project (FOR SHARE) → role binding (read) → run (FOR NO KEY UPDATE).
create or replace function ql_api.run_cancel_request_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_run_id uuid,
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
-- Runs in a SERIALIZABLE short transaction that the caller opens (and retries on 40001 a bounded
-- number of times); the function refuses any other isolation. It re-verifies the admitted policy
-- (project locked, current binding read: versions, active, owner/admin/operator) BEFORE the Run is
-- touched, then writes the durable intent with database time, reason `user` (callers cannot choose
-- a reason), Run version/event sequence +1 and an actor-bound run.cancel_requested event.
-- First commit: accepted (202). Then already_requested / already_terminal (200), no second event.
-- A Run of another Project and a missing Run are the same not_found. The intent promises no stop:
-- a Worker sees it at its next lease control; convergence ends what no Worker holds.
declare
  v_fence jsonb;
  v_digest bytea;
  v_mutation ql.mutations;
  v_run ql.runs;
  v_kind text;
  v_status text;
  v_now bigint;
begin
  if current_setting('transaction_isolation') <> 'serializable' then
    raise exception using errcode = 'QLISO',
      message = 'run_cancel_request_v1 must run in a SERIALIZABLE transaction';
  end if;
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_run_id is null then return ql.outcome('invalid', 'run_id'); end if;
  if p_mutation_id is null or p_mutation_id !~ '^[A-Za-z0-9._:-]{1,128}$' then
    return ql.outcome('invalid', 'mutation_id');
  end if;
  if p_admitted_project_version is null or p_admitted_binding_version is null then
    return ql.outcome('invalid', 'admitted_version');
  end if;

  v_fence := ql.policy_fence(p_subject_id, p_project_id, 'run.stop', p_admitted_project_version,
                             p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;

  select * into v_run from ql.runs r where r.id = p_run_id and r.project_id = p_project_id for no key update;
  if v_run.id is null then return ql.outcome('not_found', 'run'); end if;

  v_digest := sha256(convert_to('run.cancel:' || p_project_id::text || ':' || p_run_id::text, 'UTF8'));
  select * into v_mutation from ql.mutations m where m.subject_id = p_subject_id and m.mutation_id = p_mutation_id;
  if v_mutation.subject_id is not null and v_mutation.command_digest <> v_digest then
    return ql.outcome('fenced', 'mutation_conflict');
  end if;

  v_now := ql.now_ms();
  if ql.is_terminal(v_run.status) then
    v_status := 'already_terminal';
  elsif v_run.cancel_requested_at_ms is not null then
    v_status := 'already_requested';
  else
    select s.kind into strict v_kind from ql.subjects s where s.id = p_subject_id;
    perform ql.run_cancel_intent(p_run_id, 'user', v_kind, p_subject_id, v_now);
    select * into v_run from ql.runs r where r.id = p_run_id;
    v_status := 'accepted';
  end if;

  if v_mutation.subject_id is null then
    insert into ql.mutations (subject_id, mutation_id, command_digest, result, created_at_ms)
    values (p_subject_id, p_mutation_id, v_digest, jsonb_build_object('status', v_status, 'runId', p_run_id), v_now);
  end if;
  return jsonb_build_object('status', v_status, 'runId', p_run_id, 'runStatus', v_run.status,
                            'cancelRequestedAtMs', v_run.cancel_requested_at_ms, 'reason', v_run.cancel_reason);
end;
$$;

comment on function ql_api.run_cancel_request_v1(uuid, uuid, uuid, text, bigint, bigint) is
'Returns accepted | already_requested | already_terminal {runId, runStatus, cancelRequestedAtMs, reason} | '
'invalid | not_found (project, run) | fenced (ql.policy_fence reasons, mutation_conflict). Raises QLISO outside '
'a SERIALIZABLE transaction.';
grant execute on function ql_api.run_cancel_request_v1(uuid, uuid, uuid, text, bigint, bigint) to ql_runtime;
