-- Revert qinglong:ql/notify_emit from pg
begin;
set local role ql_owner;
drop function ql.notify_emit(uuid, text, jsonb, bigint);
commit;
