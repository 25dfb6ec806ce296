-- Revert qinglong:ql/invalid_reasons_run_list from pg
-- PostgreSQL cannot drop an enum value. Nothing returns these reasons once ql_api/run_list_v1 (which
-- requires this change, so it is reverted first) is gone; the deploy adds them `if not exists`, so a
-- revert and a redeploy leave the same catalogue. Reverting ql/outcome_reasons drops the whole type.
begin;
select 1;
commit;
