-- Revert qinglong:ql/worker_presence from pg
begin;
set local role ql_owner;
drop function ql.worker_presence(uuid);
commit;
