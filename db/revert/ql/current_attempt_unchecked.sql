-- Revert qinglong:ql/current_attempt_unchecked from pg
-- The key comes back NOT VALID (rows written meanwhile are not checked again), deferrable as before.
begin;
set local role ql_owner;

alter table ql.runs add constraint runs_current_attempt_id_fkey foreign key (current_attempt_id)
  references ql.run_attempts (id) deferrable initially deferred not valid;
comment on column ql.runs.current_attempt_id is
'The Attempt that holds the Run now (claimed, starting or running); NULL when none does. The pull predicate reads it, so a concurrent pull re-checks it after the row lock.';

commit;
