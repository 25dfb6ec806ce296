-- Deploy qinglong:ql_api/notify_worker_scan_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_worker_scan_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_worker_scan_v1: turn Worker sessions that expired without a heartbeat into worker.offline notifications (ql_notify).
-- Lock order: none taken but the insert of each session's seen row (its primary key makes it once, whoever scans).
create or replace function ql_api.notify_worker_scan_v1(p_limit integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- A live session whose expiry passed (no heartbeat in session_ttl_ms: the Worker is offline by the test
-- ql.worker_presence applies) within the last day, not seen before, oldest first, at most p_limit: it is marked seen
-- (ql.notify_offline_seen, exactly once) and notifies every Project that has a live worker.offline rule and a task
-- whose current plan uses the Worker's pool. A Worker that comes back opens a new session, whose expiry notifies
-- again. A session that expired more than a day ago (before notifications were set up, or a dispatcher down that
-- long) is not notified.
declare
  v_now bigint;
  v_session record;
  v_project uuid;
  v_seen integer := 0;
  v_written integer := 0;
begin
  if p_limit is null or p_limit not between 1 and 1000 then return ql.outcome('invalid', 'limit'); end if;
  v_now := ql.now_ms();
  for v_session in
    select s.id, s.worker_id, s.expires_at_ms, w.name, w.pool
      from ql.worker_sessions s join ql.workers w on w.id = s.worker_id
     where s.status = 'live' and s.expires_at_ms <= v_now and s.expires_at_ms > v_now - 86400000
       and not exists (select from ql.notify_offline_seen n where n.session_id = s.id)
     order by s.expires_at_ms
     limit p_limit
  loop
    insert into ql.notify_offline_seen (session_id, worker_id, seen_at_ms)
    values (v_session.id, v_session.worker_id, v_now) on conflict do nothing;
    continue when not found;
    v_seen := v_seen + 1;
    for v_project in
      select distinct nr.project_id from ql.notify_rules nr
       where nr.removed_at_ms is null and 'worker.offline' = any (nr.events)
         and exists (select from ql.tasks t join ql.task_execution_revisions r on r.id = t.current_revision_id
                      where t.project_id = nr.project_id and coalesce(r.plan_json ->> 'pool', 'default') = v_session.pool)
    loop
      v_written := v_written + ql.notify_emit(v_project, 'worker.offline',
        jsonb_build_object('event', 'worker.offline', 'worker', v_session.name, 'pool', v_session.pool,
                           'sessionExpiredAtMs', v_session.expires_at_ms, 'atMs', v_now), v_now);
    end loop;
  end loop;
  return jsonb_build_object('status', 'ok', 'sessions', v_seen, 'notifications', v_written);
end;
$$;

comment on function ql_api.notify_worker_scan_v1(integer) is
'Returns ok {sessions, notifications} | invalid (limit). Raises nothing on input.';
grant execute on function ql_api.notify_worker_scan_v1(integer) to ql_notify;

commit;
