-- Revert qinglong:ql/reject_mutation from pg
-- RESTORES the previous instance: the body of deploy/ql/reject_mutation@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql.reject_mutation() from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql.reject_mutation: trigger that makes a table immutable or append-only.
-- Attached BEFORE UPDATE OR DELETE (and TRUNCATE) to task revisions, run events and the audit.
-- signature: ql.reject_mutation()
create or replace function ql.reject_mutation()
returns trigger
language plpgsql
volatile
as $$
begin
  raise exception using
    errcode = 'QLIMM',
    message = pg_catalog.format('%s.%s is immutable: %s refused', tg_table_schema, tg_table_name, tg_op),
    hint = 'Write a new row instead (a new task revision, a new event).';
end;
$$;

comment on function ql.reject_mutation() is
'Trigger: refuses UPDATE, DELETE and TRUNCATE. Raises QLIMM (immutable row).';

commit;
