-- Deploy qinglong:ql/name_is_uuid to pg
-- FROZEN COPY of db/functions/ql/name_is_uuid.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.name_is_uuid: a user-created name that reads as a uuid (and so could be taken for an id where names and ids share one argument).
create or replace function ql.name_is_uuid(p_name text)
returns boolean
language sql
immutable
parallel safe
-- Projects, tasks, subjects and Workers are each named by their id or their name in one argument, the id
-- tried first (ql.project_named, ql_api.task_status_set_v1, ql_api.subject_status_set_v1,
-- ql_api.worker_status_set_v1, the shell's project paths, the CLI): a name that reads as a uuid could never be
-- addressed by name. So the creators refuse it (invalid name). "Reads as a uuid" is wider than the canonical
-- form the lookups take, so no spelling another reader accepts slips through: 32 hex digits in either case once
-- a leading urn:uuid:, braces and hyphens are dropped (PostgreSQL's uuid input and Python's uuid.UUID both read
-- those forms).
return pg_catalog.translate(pg_catalog.regexp_replace(p_name, '^urn:uuid:', '', 'i'), '{}-', '')
       ~* '^[0-9a-f]{32}$';

comment on function ql.name_is_uuid(text) is
'Returns true when p_name, without a leading urn:uuid:, braces and hyphens, is 32 hex digits; false otherwise; '
'NULL for NULL. Never raises.';

commit;
