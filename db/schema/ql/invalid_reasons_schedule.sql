-- The invalid reasons of task schedules, appended to ql.invalid_reason (whose order
-- qinglong.wire.errors.INVALID_REASONS mirrors): cron (a malformed or out-of-range expression),
-- cron_never_fires (no date matches it, e.g. February 30), timezone (not an IANA zone name), overlap
-- (neither skip nor allow). PostgreSQL 15 adds enum values inside a transaction, but a value cannot be
-- used before the transaction that added it commits: nothing here uses them.
begin;
set local role ql_owner;

alter type ql.invalid_reason add value if not exists 'cron';
alter type ql.invalid_reason add value if not exists 'cron_never_fires';
alter type ql.invalid_reason add value if not exists 'timezone';
alter type ql.invalid_reason add value if not exists 'overlap';

commit;
