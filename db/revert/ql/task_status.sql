-- Revert qinglong:ql/task_status from pg
-- The column goes. PostgreSQL cannot drop an enum value: nothing returns task_disabled once the functions that
-- require this change are reverted (first); the deploy adds it `if not exists`, so a revert and a redeploy
-- leave the same catalogue. Reverting ql/outcome_reasons drops the whole type.
begin;
set local role ql_owner;

alter table ql.tasks drop column status;

commit;
