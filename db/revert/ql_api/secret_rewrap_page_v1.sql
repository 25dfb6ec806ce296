-- Revert qinglong:ql_api/secret_rewrap_page_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.secret_rewrap_page_v1(text, integer, uuid);
commit;
