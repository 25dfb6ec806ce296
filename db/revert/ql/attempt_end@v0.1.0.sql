-- Revert qinglong:ql/attempt_end from pg
begin;
set local role ql_owner;
drop function ql.attempt_end(ql.runs, ql.run_attempts, integer, text, bytea, ql.actor_kind, uuid, bigint, uuid, uuid);
commit;
