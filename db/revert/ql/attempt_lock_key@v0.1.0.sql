-- Revert qinglong:ql/attempt_lock_key from pg
begin;
set local role ql_owner;
drop function ql.attempt_lock_key(uuid);
commit;
