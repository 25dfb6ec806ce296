-- The invalid reasons of ql_api.run_list_v1's filters, appended to ql.invalid_reason (whose order
-- qinglong.wire.errors.INVALID_REASONS mirrors): status (not a Run status), time_range (a bound out of
-- range, or since not before until), cursor (not a cursor run_list_v1 made).
begin;
set local role ql_owner;

alter type ql.invalid_reason add value if not exists 'status';
alter type ql.invalid_reason add value if not exists 'time_range';
alter type ql.invalid_reason add value if not exists 'cursor';

commit;
