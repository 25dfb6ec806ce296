-- Revert qinglong:ql_api/worker_certificate_renew_v1 from pg
begin;
set local role ql_owner;
drop function ql_api.worker_certificate_renew_v1(uuid, bytea, bigint);
commit;
