-- Revert qinglong:ql_api/output_expire_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.output_expire_v1(integer);
commit;
