-- Revert qinglong:ql/outcome_reasons_output from pg
-- PostgreSQL cannot drop an enum value. Nothing returns these reasons once the output functions (which
-- require this change, so they are reverted first) are gone; the deploy adds them `if not exists`, so a
-- revert and a redeploy leave the same catalogue. Reverting ql/outcome_reasons drops the whole types.
begin;
select 1;
commit;
