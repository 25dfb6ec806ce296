-- Revert qinglong:ql/notify from pg
-- The tables and the settings columns go. The role ql_notify stays (roles are cluster-wide, shared by every
-- database of the cluster; without its functions it can execute nothing). Enum values cannot be dropped: nothing
-- returns them once the functions that require this change are reverted (first).
begin;
revoke usage on schema ql_api from ql_notify;
set local role ql_owner;

drop table ql.notify_offline_seen;
drop table ql.notify_deliveries;
drop table ql.notify_outbox;
drop table ql.notify_rules;
alter table ql.settings drop column notify_backoff_base_ms, drop column notify_backoff_cap_ms,
  drop column notify_max_attempts;

commit;
