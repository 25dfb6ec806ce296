-- Revert qinglong:ql/unique_names from pg
-- The constraints go. PostgreSQL cannot drop an enum value: nothing returns name_taken once the functions that
-- require this change are reverted (first); the deploy adds it `if not exists`, so a revert and a redeploy
-- leave the same catalogue. Reverting ql/outcome_reasons drops the whole type.
begin;
set local role ql_owner;

alter table ql.workers drop constraint workers_name_key;
alter table ql.subjects drop constraint subjects_name_key;

commit;
