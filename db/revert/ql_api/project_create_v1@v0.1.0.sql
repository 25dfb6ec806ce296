-- Revert qinglong:ql_api/project_create_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.project_create_v1(text);
commit;
