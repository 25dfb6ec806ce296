-- Revert qinglong:ql/attempt_error_message from pg: the column goes. PostgreSQL cannot drop an enum value: the
-- invalid reason error_message stays (nothing returns it once ql_api/attempt_activation_v2, which requires this
-- change, is reverted first; the deploy adds it `if not exists`).
begin;
set local role ql_owner;

alter table ql.run_attempts drop column error_message;

commit;
