-- ql.reject_mutation: trigger that makes a table immutable or append-only.
create or replace function ql.reject_mutation()
returns trigger
language plpgsql
volatile
as $$
-- Attached BEFORE UPDATE OR DELETE (and TRUNCATE) to task revisions, run events and the audit.
begin
  raise exception using
    errcode = 'QLIMM',
    message = pg_catalog.format('%s.%s is immutable: %s refused', tg_table_schema, tg_table_name, tg_op),
    hint = 'Write a new row instead (a new task revision, a new event).';
end;
$$;

comment on function ql.reject_mutation() is
'Returns nothing: it refuses UPDATE, DELETE and TRUNCATE by raising QLIMM.';
