-- Revert qinglong:ql/retention_cycles from pg
-- schedule_fires is append-only again (rows pruned meanwhile stay gone); the cycles and the view go.
begin;
set local role ql_owner;

drop index ql.schedule_fires_fire_idx;
drop trigger schedule_fires_prune_guard on ql.schedule_fires;
drop trigger schedule_fires_append_only on ql.schedule_fires;
create trigger schedule_fires_append_only before update or delete on ql.schedule_fires
  for each row execute function ql.reject_mutation();
drop function ql.schedule_fire_prune_guard();
drop view ql.retention_status;
drop table ql.retention_cycles;

commit;
