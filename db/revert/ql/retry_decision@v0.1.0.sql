-- Revert qinglong:ql/retry_decision from pg
begin;
set local role ql_owner;
drop function ql.retry_decision(ql.runs, bigint);
commit;
