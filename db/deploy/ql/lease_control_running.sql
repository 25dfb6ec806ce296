-- Deploy qinglong:ql/lease_control_running to pg
-- FROZEN COPY of db/schema/ql/lease_control_running.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The invalid reason `running` (docs/decisions/0031): a renewal whose running flag is NULL
-- (ql_api.attempt_lease_control_v2). ql.invalid_reason's order is mirrored by qinglong.wire.errors.INVALID_REASONS.
begin;
set local role ql_owner;

alter type ql.invalid_reason add value if not exists 'running';

commit;
