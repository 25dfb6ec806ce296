-- ql.runs.current_attempt_id loses its foreign key to ql.run_attempts (docs/decisions/0018-retention-that-keeps-up.md).
-- Nothing indexes runs(current_attempt_id), so PostgreSQL checked every deleted Attempt by a sequential scan of
-- ql.runs: retention pruned 80 Runs a second. An index would cost every pull and completion a write; the key
-- guarded nothing the writers do not: the pull sets current_attempt_id to the Attempt it inserts in the same
-- transaction, ql.attempt_end clears it, and ql_api.prune_v1 clears it before deleting the Attempt. The deferred
-- check each pull queued goes with it.
begin;
set local role ql_owner;

alter table ql.runs drop constraint runs_current_attempt_id_fkey;
comment on column ql.runs.current_attempt_id is
'The Attempt that holds the Run now (claimed, starting or running); NULL when none does. The pull predicate reads '
'it, so a concurrent pull re-checks it after the row lock. Not a foreign key: the writers keep it (the pull sets it '
'to the Attempt it inserts, ql.attempt_end and ql_api.prune_v1 clear it).';

commit;
