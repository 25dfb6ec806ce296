-- Revert qinglong:ql/secret_destroy from pg
begin;
set local role ql_owner;
drop function ql.secret_destroy(uuid, integer, bigint);
commit;
