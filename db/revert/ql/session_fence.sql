-- Revert qinglong:ql/session_fence from pg
begin;
set local role ql_owner;
drop function ql.session_fence(ql.worker_sessions, uuid, bigint, bigint);
commit;
