-- Revert qinglong:ql_api/notify_prune_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.notify_prune_v1(integer);
commit;
