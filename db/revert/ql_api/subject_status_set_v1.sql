-- Revert qinglong:ql_api/subject_status_set_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.subject_status_set_v1(text, boolean);
commit;
