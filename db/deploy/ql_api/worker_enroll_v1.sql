-- Deploy qinglong:ql_api/worker_enroll_v1 to pg
-- FROZEN COPY of db/functions/ql_api/worker_enroll_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.worker_enroll_v1: enrol a Worker with its client certificate's SHA-256, or re-enrol it.
-- Lock order: worker (FOR UPDATE: a re-enrolment may change its name, a key of the table, so the row is locked in
--   that mode first, never upgraded) → its live session (FOR UPDATE).
create or replace function ql_api.worker_enroll_v1(p_worker_id uuid, p_name text, p_pool text, p_cert_fingerprint bytea)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Re-enrolment (a new certificate, a new pool) bumps the generation and closes the live session in the
-- same transaction, so everything the old generation holds is fenced at once; it forgets the certificate a
-- renewal replaced and the recorded expiry (ql/worker_certificates: the CLI records the new one with
-- ql_api.worker_certificate_renew_v1 in the same transaction).
-- Names are unique (ql/unique_names): a name another Worker holds is fenced name_taken and nothing changes,
-- also when a concurrent enrolment or re-enrolment takes it first (the unique index waits for it, then refuses).
declare
  v_worker ql.workers;
begin
  if p_worker_id is null then return ql.outcome('invalid', 'worker_id'); end if;
  if p_name is null or length(p_name) not between 1 and 200 then return ql.outcome('invalid', 'name'); end if;
  if ql.name_is_uuid(p_name) then
    return ql.outcome('invalid', 'name') || jsonb_build_object('detail', 'a name that reads as a uuid would be taken for an id');
  end if;
  if p_pool is null or p_pool !~ '^[a-z0-9_-]{1,64}$' then return ql.outcome('invalid', 'pool'); end if;
  if p_cert_fingerprint is null or octet_length(p_cert_fingerprint) <> 32 then
    return ql.outcome('invalid', 'cert_fingerprint');
  end if;

  select * into v_worker from ql.workers w where w.id = p_worker_id for update;
  if v_worker.id is null then
    insert into ql.workers (id, name, pool, cert_fingerprint) values (p_worker_id, p_name, p_pool, p_cert_fingerprint)
    on conflict (name) do nothing
    returning * into v_worker;
    if v_worker.id is null then return ql.outcome('fenced', 'name_taken'); end if;
    return jsonb_build_object('status', 'enrolled', 'workerId', v_worker.id, 'generation', v_worker.generation);
  end if;
  begin  -- first, so that a name another Worker holds (or takes meanwhile) leaves everything as it was
    update ql.workers w
       set generation = w.generation + 1, name = p_name, pool = p_pool, cert_fingerprint = p_cert_fingerprint,
           previous_cert_fingerprint = null, cert_not_after_ms = null, status = 'active'
     where w.id = p_worker_id
    returning * into v_worker;
  exception when unique_violation then
    return ql.outcome('fenced', 'name_taken');
  end;
  perform 1 from ql.worker_sessions s where s.worker_id = p_worker_id and s.status = 'live' for update;
  update ql.worker_sessions s set status = 'closed', ended_at_ms = ql.now_ms()
   where s.worker_id = p_worker_id and s.status = 'live';
  return jsonb_build_object('status', 'reenrolled', 'workerId', v_worker.id, 'generation', v_worker.generation);
end;
$$;

comment on function ql_api.worker_enroll_v1(uuid, text, text, bytea) is
'Returns enrolled | reenrolled {workerId, generation} | invalid (worker_id, name, pool, cert_fingerprint; a name '
'that reads as a uuid, ql.name_is_uuid, with a detail) | fenced (name_taken). Raises nothing on input.';

commit;
