-- ql_api.retention_maintain_v1: drop the oldest partition of ql.run_events or ql.security_audit past its retention.
-- Lock order: ACCESS EXCLUSIVE on the partition and its parent (DROP), last in its transaction, waited for at most
--   20 ms at a time.
create or replace function ql_api.retention_maintain_v1()
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- At most ONE partition per call (ql_api.retain calls it again, each call its own transaction), the one whose upper
-- bound is oldest among those that may go:
-- * a security_audit partition whose every row is older than audit_retention_days (its upper bound is at or before
--   the cutoff);
-- * a run_events partition past run_retention_days that holds no event of a Run still kept (ql_api.prune_v1 deleted
--   them all). That is decided before any lock, by index: no new event lands in a partition that ended before the
--   cutoff (events are stamped with database time) and a pruned Run never comes back, so the answer can only go
--   from kept to not kept. Only Runs created before the partition's upper bound plus a day can have an event in it
--   (ql.run_event_insert's bound), found per Project and status (ql.run_statuses, then a range of
--   ql.runs_history_status_idx each), each probed in the partition's primary key: the cost is a few descents a
--   Project and the old kept Runs, never a scan of the partition or of a Project's history.
-- NULL retention keeps that table's partitions. Rows leave only this way: run_events and security_audit refuse
-- UPDATE, DELETE and TRUNCATE for every role.
-- The DROP takes ACCESS EXCLUSIVE on the parent, so writers of the table queue behind it while it waits: it waits at
-- most 20 ms (lock_timeout), up to 5 times 100 ms apart, and is the last statement of the transaction, so the
-- parent is held only for the drop itself. A partition still busy after that (a long reader of the table) is named
-- in busy and tried by the next cycle. DETACH PARTITION … CONCURRENTLY would not need the parent's lock, but
-- PostgreSQL runs it only as a top-level statement, never inside a function or procedure (docs/decisions/0018).
declare
  v_now bigint;
  v_run_days integer;
  v_audit_days integer;
  v_part record;
  v_kept boolean;
  v_name text;
  v_busy text[] := array[]::text[];
begin
  v_now := ql.now_ms();
  select st.run_retention_days, st.audit_retention_days into v_run_days, v_audit_days from ql.settings st;
  for v_part in
    select i.inhrelid::regclass as part, i.inhparent::regclass as parent, ql.partition_upper_ms(i.inhrelid::regclass) as upper_ms
      from pg_catalog.pg_inherits i
     where i.inhparent in ('ql.run_events'::regclass, 'ql.security_audit'::regclass)
     order by 3
  loop
    continue when v_part.parent = 'ql.security_audit'::regclass
      and (v_audit_days is null or v_part.upper_ms > v_now - v_audit_days::bigint * 86400000);
    continue when v_part.parent = 'ql.run_events'::regclass
      and (v_run_days is null or v_part.upper_ms > v_now - v_run_days::bigint * 86400000);
    if v_part.parent = 'ql.run_events'::regclass then
      execute pg_catalog.format(
        'select exists (select from ql.projects p cross join unnest(ql.run_statuses(p.id)) st (status) '
        'where exists (select from ql.runs r where r.project_id = p.id and r.status = st.status '
        'and r.created_at_ms < $1 and exists (select from %s e where e.run_id = r.id)))', v_part.part)
        using v_part.upper_ms + 86400000 into v_kept;
      continue when v_kept;
    end if;
    v_name := v_part.part::text;  -- once dropped, a regclass prints as a number
    for v_try in 1 .. 5 loop
      begin
        perform pg_catalog.set_config('lock_timeout', '20ms', true);
        execute pg_catalog.format('drop table %s', v_part.part);
        return jsonb_build_object('status', 'ok', 'dropped', v_name, 'busy', to_jsonb(v_busy));
      exception when lock_not_available then
        perform pg_catalog.pg_sleep(0.1);
      end;
    end loop;
    v_busy := v_busy || v_name;
  end loop;
  return jsonb_build_object('status', 'ok', 'dropped', null, 'busy', to_jsonb(v_busy));
end;
$$;

comment on function ql_api.retention_maintain_v1() is
'Returns ok {dropped: the partition dropped or null, busy: partitions that could go but stayed locked}. Raises '
'nothing on input.';
grant execute on function ql_api.retention_maintain_v1() to ql_scheduler;
