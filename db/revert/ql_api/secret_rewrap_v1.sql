-- Revert qinglong:ql_api/secret_rewrap_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.secret_rewrap_v1(uuid, text, text, bytea);
commit;
