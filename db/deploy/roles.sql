-- Deploy qinglong:roles to pg
-- FROZEN COPY of db/schema/roles.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The four cluster roles of docs/architecture.md §8. Roles are cluster-wide, so creation is idempotent:
-- several databases of one cluster (tests, templates) share them.
--   ql_owner      NOLOGIN, owns every object; SECURITY DEFINER functions run as it.
--   ql_runtime    LOGIN, the shell: EXECUTE on ql_api only, no table privilege.
--   ql_scheduler  LOGIN without a password, pg_cron connects as it to CALL ql_api.converge and may
--                 execute exactly that procedure and its two page functions.
--   ql_readonly   NOLOGIN, DBA read access to views granted explicitly.
begin;

do $$
declare
  v_role text;
begin
  foreach v_role in array array['ql_owner', 'ql_runtime', 'ql_scheduler', 'ql_readonly'] loop
    if not exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
      execute pg_catalog.format('create role %I nologin', v_role);
    end if;
  end loop;
end
$$;

alter role ql_runtime login;
alter role ql_scheduler login;
alter role ql_scheduler set statement_timeout = '60s';
-- A shell connection never sits idle inside a transaction while holding row locks.
alter role ql_runtime set idle_in_transaction_session_timeout = '5s';
alter role ql_runtime set statement_timeout = '10s';

commit;
