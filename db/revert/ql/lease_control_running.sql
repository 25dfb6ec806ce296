-- Revert qinglong:ql/lease_control_running from pg: PostgreSQL cannot drop an enum value. The invalid reason running
-- stays (nothing returns it once ql_api/attempt_lease_control_v2, which requires this change, is reverted first; the
-- deploy adds it `if not exists`).
select 1;
