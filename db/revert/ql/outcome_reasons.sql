-- Revert qinglong:ql/outcome_reasons from pg
begin;
drop type ql.not_found_reason;
drop type ql.empty_reason;
drop type ql.invalid_reason;
drop type ql.fence_reason;
drop type ql.outcome_status;
commit;
