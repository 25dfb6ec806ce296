-- Revert qinglong:ql_api/project_workers_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.project_workers_v1(uuid);
commit;
