-- Revert qinglong:ql/attempt_secret_delivery from pg
begin;
set local role ql_owner;
drop function ql.attempt_secret_delivery(uuid);
commit;
