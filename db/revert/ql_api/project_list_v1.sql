-- Revert qinglong:ql_api/project_list_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.project_list_v1();
commit;
