-- Revert qinglong:ql/stable_event_id from pg
begin;
set local role ql_owner;
drop function ql.stable_event_id(text, uuid, uuid, bigint);
commit;
