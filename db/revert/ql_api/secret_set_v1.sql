-- Revert qinglong:ql_api/secret_set_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.secret_set_v1(uuid, uuid, text, uuid, integer, text, bytea, bytea, bytea, text, bigint, bigint);
commit;
