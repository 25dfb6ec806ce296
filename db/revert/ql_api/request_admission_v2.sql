-- Revert qinglong:ql_api/request_admission_v2 from pg
begin;
set local role ql_owner;
drop function ql_api.request_admission_v2(bytea, text, text, text, text);
commit;
