-- Revert qinglong:ql/outcome from pg
begin;
set local role ql_owner;
drop function ql.outcome(text, text);
commit;
