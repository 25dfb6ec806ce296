-- Revert qinglong:ql/schedule_fires_ahead from pg
begin;
set local role ql_owner;
drop function ql.schedule_fires_ahead(text, text, bigint, integer);
commit;
