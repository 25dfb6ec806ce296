-- Revert qinglong:ql/lease_ttl_ms from pg
begin;
set local role ql_owner;
drop function ql.lease_ttl_ms(text, uuid);
commit;
