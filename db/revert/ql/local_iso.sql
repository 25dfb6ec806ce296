-- Revert qinglong:ql/local_iso from pg
begin;
set local role ql_owner;
drop function ql.local_iso(timestamptz, text);
commit;
