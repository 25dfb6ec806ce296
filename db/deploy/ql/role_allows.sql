-- Deploy qinglong:ql/role_allows to pg
-- FROZEN COPY of db/functions/ql/role_allows.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.role_allows: the static permission table of project roles.
create or replace function ql.role_allows(p_role text, p_permission text)
returns boolean
language sql
immutable
parallel safe
--   run.read  : owner, admin, operator, viewer
--   run.start : owner, admin, operator
--   run.stop  : owner, admin, operator
--   secret.read  : owner, admin, operator, viewer (names, versions, sizes: never a value)
--   secret.write : owner, admin
--   task.write   : owner, admin (a task's plan is what Workers run: a new revision, its status, its schedule)
return coalesce(case p_permission
  when 'run.read' then p_role in ('owner', 'admin', 'operator', 'viewer')
  when 'run.start' then p_role in ('owner', 'admin', 'operator')
  when 'run.stop' then p_role in ('owner', 'admin', 'operator')
  when 'secret.read' then p_role in ('owner', 'admin', 'operator', 'viewer')
  when 'secret.write' then p_role in ('owner', 'admin')
  when 'task.write' then p_role in ('owner', 'admin')
end, false);

comment on function ql.role_allows(text, text) is
'Returns true when the role grants the permission (run.read, run.start, run.stop, secret.read, secret.write, '
'task.write), '
'false for anything else. '
'Never raises.';

commit;
