-- Revert qinglong:ql_api/bundle_seal_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.bundle_seal_v1(text, jsonb);
commit;
