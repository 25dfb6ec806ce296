-- Revert qinglong:ql/runs_retry_offerable_idx from pg
begin;
set local role ql_owner;
drop index ql.runs_retry_offerable_idx;
commit;
