-- Revert qinglong:ql/bundles from pg
-- The bundle index, the revisions' plan_signature (its CHECK with it), the tables and the setting go. PostgreSQL
-- cannot drop an enum value: nothing returns digest, size_bytes, index, data, entries, plan_signature, revision_id,
-- or not_found bundle, chunk, revision once the functions that require this change are reverted (first); the deploy
-- adds them `if not exists`, so a revert and a redeploy leave the same catalogue.
begin;
set local role ql_owner;

drop index ql.task_execution_revisions_bundle_idx;
alter table ql.task_execution_revisions drop column plan_signature;
drop table ql.bundle_chunks;
drop table ql.bundles;
alter table ql.settings drop column bundle_max_bytes;

commit;
