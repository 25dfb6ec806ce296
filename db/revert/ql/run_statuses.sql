-- Revert qinglong:ql/run_statuses from pg
begin;
set local role ql_owner;
drop function ql.run_statuses(uuid, uuid);
commit;
