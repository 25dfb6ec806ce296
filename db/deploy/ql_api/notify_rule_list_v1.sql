-- Deploy qinglong:ql_api/notify_rule_list_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_rule_list_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_rule_list_v1: a Project's live notification rules (every role: run.read); names of secrets, never a value.
create or replace function ql_api.notify_rule_list_v1(p_project text)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- By name. Each rule with its pending notification count. Another Project's rules never appear. Reads only.
-- Operators call it as a DBA with a name; the user API calls it with the admitted id.
declare
  v_project ql.projects;
begin
  if p_project is null or length(p_project) not between 1 and 200 then return ql.outcome('invalid', 'project_id'); end if;
  v_project := ql.project_named(p_project);
  if v_project.id is null then return ql.outcome('not_found', 'project'); end if;
  return jsonb_build_object('status', 'listed', 'projectId', v_project.id, 'project', v_project.name, 'rules',
    (select coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
              'name', r.name, 'events', to_jsonb(r.events), 'channel', r.channel, 'url', r.url,
              'secretName', r.secret_name, 'template', r.template, 'createdAtMs', r.created_at_ms,
              'updatedAtMs', r.updated_at_ms,
              'pending', (select count(*) from ql.notify_outbox o where o.rule_id = r.id and o.state = 'pending')))
              order by r.name), '[]'::jsonb)
       from ql.notify_rules r
      where r.project_id = v_project.id and r.removed_at_ms is null));
end;
$$;

comment on function ql_api.notify_rule_list_v1(text) is
'Returns listed {projectId, project, rules: [{name, events, channel, url?, secretName, template?, createdAtMs, '
'updatedAtMs, pending}]} | invalid (project_id) | not_found (project). Raises nothing on input.';
grant execute on function ql_api.notify_rule_list_v1(text) to ql_runtime;

commit;
