-- Revert qinglong:ql/run_requeue from pg
begin;
set local role ql_owner;
drop function ql.run_requeue(ql.runs, ql.actor_kind, bigint);
commit;
