-- Revert qinglong:ql/now_ms from pg
begin;
set local role ql_owner;
drop function ql.now_ms();
commit;
