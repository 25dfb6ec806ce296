-- Revert qinglong:ql/secrets from pg
-- The tables and the domain go. PostgreSQL cannot drop an enum value: nothing returns version_id, sealed or
-- not_found secret once the functions that require this change are reverted (first); the deploy adds them
-- `if not exists`, so a revert and a redeploy leave the same catalogue.
begin;
set local role ql_owner;

drop table ql.attempt_secrets;
drop table ql.secret_versions;
drop table ql.secrets;
drop domain ql.secret_name;

commit;
