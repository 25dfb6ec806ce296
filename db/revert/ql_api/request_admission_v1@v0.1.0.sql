-- Revert qinglong:ql_api/request_admission_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.request_admission_v1(bytea, uuid, text, text, text);
commit;
