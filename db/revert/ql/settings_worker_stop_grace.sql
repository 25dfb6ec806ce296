-- Revert qinglong:ql/settings_worker_stop_grace from pg
-- The column goes; ql_api.converge_grace_floor_v1, which reads it, is reverted first (it requires this change).
begin;
set local role ql_owner;

alter table ql.settings drop column worker_stop_grace_ms;

commit;
