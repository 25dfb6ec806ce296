-- Deploy qinglong:schemas to pg
-- FROZEN COPY of db/schema/schemas.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Two schemas say who may touch what (STYLE.md): `ql` holds tables and private helpers and is
-- reachable by ql_owner only; `ql_api` is the callable surface. PUBLIC loses EXECUTE on every
-- function ql_owner creates, once, here; each ql_api function grants itself to ql_runtime.
begin;

create schema ql authorization ql_owner;
comment on schema ql is 'Qinglong control-plane state: tables and private helpers. No grants outside ql_owner.';

create schema ql_api authorization ql_owner;
comment on schema ql_api is 'Qinglong control-plane API: one SECURITY DEFINER function per wire command.';

revoke all on schema ql from public;
revoke all on schema ql_api from public;
grant usage on schema ql_api to ql_runtime, ql_scheduler;

alter default privileges for role ql_owner revoke execute on functions from public;

commit;
