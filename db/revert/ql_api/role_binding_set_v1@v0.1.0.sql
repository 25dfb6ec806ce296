-- Revert qinglong:ql_api/role_binding_set_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.role_binding_set_v1(uuid, uuid, text, boolean);
commit;
