-- Revert qinglong:ql_api/retention_maintain_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.retention_maintain_v1();
commit;
