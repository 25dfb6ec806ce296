-- Deploy qinglong:ql/outcome_reasons_output to pg
-- FROZEN COPY of db/schema/ql/outcome_reasons_output.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The outcome reasons of task output (ql/output), appended to the catalogue (ql.invalid_reason's order is
-- mirrored by qinglong.wire.errors.INVALID_REASONS): invalid stream (neither stdout nor stderr), offset
-- (negative, or a gap before the stream's head is complete: ql_api.output_append_v1), attempt (an Attempt
-- number outside 1..100: ql_api.run_output_v1); not_found attempt (a Run has no Attempt of that number).
-- PostgreSQL 15 adds enum values inside a transaction, but a value cannot be used before the transaction
-- that added it commits: nothing here uses them.
begin;
set local role ql_owner;

alter type ql.invalid_reason add value if not exists 'stream';
alter type ql.invalid_reason add value if not exists 'offset';
alter type ql.invalid_reason add value if not exists 'attempt';
alter type ql.not_found_reason add value if not exists 'attempt';

commit;
