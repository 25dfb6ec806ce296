-- Revert qinglong:ql_api/artifact_upload_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.artifact_upload_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bytea, integer, bytea);
commit;
