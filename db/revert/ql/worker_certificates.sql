-- Revert qinglong:ql/worker_certificates from pg
-- The columns go (the functions that read them require this change, so they are reverted first). PostgreSQL
-- cannot drop an enum value: the deploy adds not_after `if not exists`, so a revert and a redeploy leave the
-- same catalogue.
begin;
set local role ql_owner;

alter table ql.workers drop column cert_not_after_ms, drop column previous_cert_fingerprint;

commit;
