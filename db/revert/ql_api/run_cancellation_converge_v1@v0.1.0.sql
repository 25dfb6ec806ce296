-- Revert qinglong:ql_api/run_cancellation_converge_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.run_cancellation_converge_v1(integer);
commit;
