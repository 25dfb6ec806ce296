-- Deploy qinglong:ql/attempt_error_message to pg
-- FROZEN COPY of db/schema/ql/attempt_error_message.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Why an Attempt could not start, in words (docs/decisions/0025-start-failures.md): the short message a Worker's
-- start-failure ACK gives with its code (ql_api.attempt_activation_v2), kept beside the code on the Attempt and shown
-- by ql_api.run_timeline_v1 in the payload of the Attempt's end. An Attempt that ended otherwise has none.
-- The new invalid reason error_message is a message outside that shape (ql.invalid_reason, whose order
-- qinglong.wire.errors.INVALID_REASONS mirrors). Adds a column without a default: no row is rewritten, and the
-- check is NOT VALID (every existing row is NULL; every new value is checked).
begin;
set local role ql_owner;

alter type ql.invalid_reason add value if not exists 'error_message';

alter table ql.run_attempts add column error_message text;
alter table ql.run_attempts add constraint run_attempts_error_message_check
  check (error_message ~ '^[^\x01-\x1f\x7f\u2028\u2029]{1,200}$') not valid;
comment on column ql.run_attempts.error_message is
'Why the Attempt could not start, in words (1..200 characters, no control character), as its Worker said; NULL otherwise.';

commit;
