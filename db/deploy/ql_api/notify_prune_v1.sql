-- Deploy qinglong:ql_api/notify_prune_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_prune_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_prune_v1: one bounded page of notification retention (ql_notify): ended notifications and their attempts, old seen sessions.
-- Lock order: ended outbox rows (FOR UPDATE SKIP LOCKED), their delivery rows (cascade); then seen sessions.
create or replace function ql_api.notify_prune_v1(p_limit integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The cutoff is database time minus ql.settings.run_retention_days (NULL: nothing of the outbox is pruned), the
-- Runs' retention (decision 0009). At most p_limit ended notifications (delivered, dead, dropped) that ended before
-- it, oldest first (ql.notify_outbox_ended_idx), go with their delivery attempts; pending ones are never pruned.
-- Seen Worker sessions older than two days go (the scan looks back one day), at most p_limit.
declare
  v_days integer;
  v_now bigint;
  v_outbox integer := 0;
  v_seen integer := 0;
begin
  if p_limit is null or p_limit not between 1 and 10000 then return ql.outcome('invalid', 'limit'); end if;
  v_now := ql.now_ms();
  select st.run_retention_days into v_days from ql.settings st;
  if v_days is not null then
    delete from ql.notify_outbox o
     where o.id in (select x.id from ql.notify_outbox x
                     where x.state <> 'pending' and x.ended_at_ms < v_now - v_days::bigint * 86400000
                     order by x.ended_at_ms limit p_limit for update skip locked);
    get diagnostics v_outbox = row_count;
  end if;
  delete from ql.notify_offline_seen n
   where n.session_id in (select x.session_id from ql.notify_offline_seen x
                           where x.seen_at_ms < v_now - 2 * 86400000 limit p_limit);
  get diagnostics v_seen = row_count;
  return jsonb_build_object('status', 'ok', 'notifications', v_outbox, 'seen', v_seen);
end;
$$;

comment on function ql_api.notify_prune_v1(integer) is
'Returns ok {notifications, seen} | invalid (limit). Raises nothing on input.';
grant execute on function ql_api.notify_prune_v1(integer) to ql_notify;

commit;
