-- Deploy qinglong:ql_api/worker_certificate_renew_v1 to pg
-- FROZEN COPY of db/functions/ql_api/worker_certificate_renew_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.worker_certificate_renew_v1: record a Worker's renewed certificate without a new generation (decision 0012).
-- Lock order: worker (FOR NO KEY UPDATE, as a session open takes it: a renewal waits for an open, or the open for
--   the renewal, and the open then sees both certificates).
create or replace function ql_api.worker_certificate_renew_v1(
  p_worker_id uuid,
  p_cert_fingerprint bytea,
  p_not_after_ms bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The new certificate becomes current, the one it replaces stays
-- accepted at session open (previous_cert_fingerprint) until the next renewal or a re-enrolment, and the new
-- one's expiry is recorded. Sessions, Attempts and the generation are untouched: nothing the Worker holds is
-- fenced. The current certificate again records its expiry only (how `qinglong worker enroll` records the
-- expiry of the certificate it just enrolled, and a replay of a renewal changes nothing more).
declare
  v_worker ql.workers;
begin
  if p_worker_id is null then return ql.outcome('invalid', 'worker_id'); end if;
  if p_cert_fingerprint is null or octet_length(p_cert_fingerprint) <> 32 then
    return ql.outcome('invalid', 'cert_fingerprint');
  end if;
  if p_not_after_ms is null or p_not_after_ms <= ql.now_ms() or p_not_after_ms > ql.max_safe_integer() then
    return ql.outcome('invalid', 'not_after');
  end if;

  select * into v_worker from ql.workers w where w.id = p_worker_id for no key update;
  if not found then return ql.outcome('not_found', 'worker'); end if;
  if v_worker.cert_fingerprint = p_cert_fingerprint then
    update ql.workers w set cert_not_after_ms = p_not_after_ms where w.id = p_worker_id
    returning * into v_worker;
  else
    update ql.workers w
       set previous_cert_fingerprint = w.cert_fingerprint, cert_fingerprint = p_cert_fingerprint,
           cert_not_after_ms = p_not_after_ms
     where w.id = p_worker_id
    returning * into v_worker;
  end if;
  return jsonb_build_object('status', 'renewed', 'workerId', v_worker.id, 'generation', v_worker.generation,
    'certNotAfterMs', v_worker.cert_not_after_ms, 'previousAccepted', v_worker.previous_cert_fingerprint is not null);
end;
$$;

comment on function ql_api.worker_certificate_renew_v1(uuid, bytea, bigint) is
'Returns renewed {workerId, generation, certNotAfterMs, previousAccepted} | invalid (worker_id, '
'cert_fingerprint, not_after) | not_found (worker). Raises nothing on input.';

commit;
