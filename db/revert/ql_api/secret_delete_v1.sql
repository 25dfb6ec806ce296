-- Revert qinglong:ql_api/secret_delete_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.secret_delete_v1(uuid, uuid, text, text, bigint, bigint);
commit;
