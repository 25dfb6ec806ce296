-- Revert qinglong:ql/reject_mutation from pg
begin;
set local role ql_owner;
drop function ql.reject_mutation();
commit;
