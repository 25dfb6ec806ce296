-- Deploy qinglong:ql/invalid_reasons_run_list to pg
-- FROZEN COPY of db/schema/ql/invalid_reasons_run_list.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The invalid reasons of ql_api.run_list_v1's filters, appended to ql.invalid_reason (whose order
-- qinglong.wire.errors.INVALID_REASONS mirrors): status (not a Run status), time_range (a bound out of
-- range, or since not before until), cursor (not a cursor run_list_v1 made).
begin;
set local role ql_owner;

alter type ql.invalid_reason add value if not exists 'status';
alter type ql.invalid_reason add value if not exists 'time_range';
alter type ql.invalid_reason add value if not exists 'cursor';

commit;
