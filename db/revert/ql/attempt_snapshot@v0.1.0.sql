-- Revert qinglong:ql/attempt_snapshot from pg
begin;
set local role ql_owner;
drop function ql.attempt_snapshot(ql.runs, ql.run_attempts, ql.run_leases);
commit;
