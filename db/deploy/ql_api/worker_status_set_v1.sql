-- Deploy qinglong:ql_api/worker_status_set_v1 to pg
-- FROZEN COPY of db/functions/ql_api/worker_status_set_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.worker_status_set_v1: disable (fencing it at once) or enable a Worker, named by its id or its name.
-- Lock order: worker (FOR NO KEY UPDATE) → its live session (FOR UPDATE), as ql_api.worker_enroll_v1.
create or replace function ql_api.worker_status_set_v1(p_worker text, p_active boolean)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Disabling fences the Worker at once, in the same transaction: its live session is closed (so every
-- Attempt-scoped call fails ql.attempt_fence with stale_session and its Leases run out to convergence),
-- and every later session open is refused with worker_disabled. Enabling lets it open a session again.
-- Setting the status it already has changes nothing.
declare
  v_id uuid;
  v_matches integer;
  v_wanted text := case when p_active then 'active' else 'disabled' end;
  v_answer text := case when p_active then 'enabled' else 'disabled' end;
  v_worker ql.workers;
  v_closed uuid;
begin
  if p_worker is null or length(p_worker) not between 1 and 200 then return ql.outcome('invalid', 'name'); end if;
  if p_active is null then return ql.outcome('invalid', 'active'); end if;
  if p_worker ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then v_id := p_worker::uuid; end if;
  select count(*), min(w.id::text)::uuid into v_matches, v_id
    from ql.workers w where w.id = v_id or w.name = p_worker;
  if v_matches = 0 then return ql.outcome('not_found', 'worker'); end if;
  if v_matches > 1 then
    return ql.outcome('invalid', 'name')
      || jsonb_build_object('detail', format('%s Workers match %L: name one by its id', v_matches, p_worker));
  end if;

  select * into v_worker from ql.workers w where w.id = v_id for no key update;
  if v_worker.status = v_wanted then
    return jsonb_build_object('status', v_answer, 'workerId', v_id,
                              'name', v_worker.name, 'changed', false, 'closedSessionId', null);
  end if;
  if not p_active then
    perform 1 from ql.worker_sessions s where s.worker_id = v_id and s.status = 'live' for update;
    update ql.worker_sessions s set status = 'closed', ended_at_ms = ql.now_ms()
     where s.worker_id = v_id and s.status = 'live'
    returning s.id into v_closed;
  end if;
  update ql.workers w set status = v_wanted where w.id = v_id;
  return jsonb_build_object('status', v_answer, 'workerId', v_worker.id,
                            'name', v_worker.name, 'changed', true, 'closedSessionId', v_closed);
end;
$$;

comment on function ql_api.worker_status_set_v1(text, boolean) is
'Returns disabled | enabled {workerId, name, changed, closedSessionId} | invalid (name, active) | not_found '
'(worker). Raises nothing on input.';

commit;
