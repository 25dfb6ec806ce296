-- Revert qinglong:ql/admission_reason from pg
begin;
set local role ql_owner;
drop function ql.admission_reason(text, text, text, text);
commit;
