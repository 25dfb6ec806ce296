-- Revert qinglong:ql_api/lease_expiry_reconcile_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.lease_expiry_reconcile_v1(integer, bigint);
commit;
