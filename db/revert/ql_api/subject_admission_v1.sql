-- Revert qinglong:ql_api/subject_admission_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.subject_admission_v1(bytea, text, text);
commit;
