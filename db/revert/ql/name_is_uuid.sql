-- Revert qinglong:ql/name_is_uuid from pg
begin;
set local role ql_owner;
drop function ql.name_is_uuid(text);
commit;
