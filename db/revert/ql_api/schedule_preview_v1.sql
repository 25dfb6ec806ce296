-- Revert qinglong:ql_api/schedule_preview_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.schedule_preview_v1(text, text, integer);
commit;
