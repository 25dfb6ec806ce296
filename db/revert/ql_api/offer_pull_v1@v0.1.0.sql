-- Revert qinglong:ql_api/offer_pull_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.offer_pull_v1(uuid, uuid, bigint, bytea, uuid);
commit;
