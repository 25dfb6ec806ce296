-- Revert qinglong:ql_api/notify_rule_remove_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.notify_rule_remove_v1(uuid, uuid, text, bigint, bigint);
commit;
