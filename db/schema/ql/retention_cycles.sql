-- Retention that keeps up (docs/decisions/0018-retention-that-keeps-up.md): each cycle of ql_api.retain leaves a row
-- in ql.retention_cycles (what it pruned, the backlog it left, whether its time budget stopped it), and
-- ql.retention_status, the DBA's view (granted to ql_readonly), says whether retention keeps up: the backlog, the
-- backlog a day before, how long the oldest Run past the retention has waited, and the alert condition.
-- ql.schedule_fires may lose rows past run_retention_days (ql_api.prune_v1), and only those: its DELETE guard
-- replaces the append-only trigger for DELETE (UPDATE and TRUNCATE stay refused).
begin;
set local role ql_owner;

create table ql.retention_cycles (
  id bigint generated always as identity primary key,
  started_at_ms ql.ms not null,
  ended_at_ms ql.ms not null,
  pages integer not null check (pages >= 0),
  runs_pruned bigint not null check (runs_pruned >= 0),
  backlog_runs bigint not null check (backlog_runs >= 0),
  finished boolean not null
);
comment on table ql.retention_cycles is
'One row per ql_api.retain cycle (kept 35 days): its time, the pages and terminal Runs it pruned, the backlog it left.';
comment on column ql.retention_cycles.backlog_runs is
'Terminal Runs past run_retention_days still there when the cycle ended (counted up to 10,000,000).';
comment on column ql.retention_cycles.finished is
'true: it stopped because nothing was left to prune; false: its time budget ended it with work left.';
create index retention_cycles_ended_idx on ql.retention_cycles (ended_at_ms);
comment on index ql.retention_cycles_ended_idx is 'The latest cycle, the cycle a day before it, and the pruning of old cycles.';

create view ql.retention_status as
select last.ended_at_ms as last_cycle_at_ms, last.runs_pruned as last_cycle_runs_pruned, last.finished as last_cycle_finished,
       last.backlog_runs, before.backlog_runs as backlog_runs_a_day_before, oldest.ended_at_ms as oldest_prunable_ended_at_ms,
       oldest.behind_ms, coalesce(oldest.behind_ms > 86400000, false) as alert
  from (select 1) one
  left join lateral (select c.* from ql.retention_cycles c order by c.ended_at_ms desc limit 1) last on true
  left join lateral (select c.backlog_runs from ql.retention_cycles c
                      where c.ended_at_ms <= last.ended_at_ms - 86400000 order by c.ended_at_ms desc limit 1) before on true
  -- The cutoff from clock_timestamp() (ql.now_ms's clock, which ql_readonly may not execute), by runs_ended_idx.
  left join lateral (select r.ended_at_ms, cut.ms - r.ended_at_ms as behind_ms
                       from (select (extract(epoch from pg_catalog.clock_timestamp()) * 1000)::bigint
                                    - st.run_retention_days::bigint * 86400000 as ms from ql.settings st) cut, ql.runs r
                      where r.ended_at_ms < cut.ms
                      order by r.ended_at_ms limit 1) oldest on true;
comment on view ql.retention_status is
'For the DBA: is retention keeping up? The last cycle (when, Runs pruned, finished or stopped by its budget), the '
'backlog of terminal Runs past run_retention_days it left and the backlog a day before it, the oldest such Run''s '
'end and how long it has been past the retention (behind_ms); alert: that Run has waited more than a day, so '
'retention has not kept up for a day. One row; cheap (indexes only).';
grant select on ql.retention_status to ql_readonly;

create function ql.schedule_fire_prune_guard() returns trigger language plpgsql volatile as $$
-- BEFORE DELETE on ql.schedule_fires: only a fire time older than run_retention_days may go (ql_api.prune_v1).
begin
  if not exists (select from ql.settings st
                  where old.fire_at_ms < ql.now_ms() - st.run_retention_days::bigint * 86400000) then
    raise exception using errcode = 'QLIMM',
      message = 'ql.schedule_fires is append-only: a fire time within run_retention_days cannot be deleted';
  end if;
  return old;
end;
$$;
comment on function ql.schedule_fire_prune_guard() is
'Returns the row when its fire time is past run_retention_days; else raises QLIMM (NULL retention: always).';
drop trigger schedule_fires_append_only on ql.schedule_fires;
create trigger schedule_fires_append_only before update on ql.schedule_fires
  for each row execute function ql.reject_mutation();
create trigger schedule_fires_prune_guard before delete on ql.schedule_fires
  for each row execute function ql.schedule_fire_prune_guard();
create index schedule_fires_fire_idx on ql.schedule_fires (fire_at_ms);
comment on index ql.schedule_fires_fire_idx is 'ql_api.prune_v1: the oldest fire times first.';

commit;
