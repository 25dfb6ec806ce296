-- Revert qinglong:ql/project_named from pg
begin;
set local role ql_owner;
drop function ql.project_named(text);
commit;
