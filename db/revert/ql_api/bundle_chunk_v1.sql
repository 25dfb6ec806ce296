-- Revert qinglong:ql_api/bundle_chunk_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.bundle_chunk_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, integer);
commit;
