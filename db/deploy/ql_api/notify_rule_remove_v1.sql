-- Deploy qinglong:ql_api/notify_rule_remove_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_rule_remove_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_rule_remove_v1: remove a Project's notification rule by name (operators: run.start); its pending notifications are dropped.
-- Lock order: project (FOR SHARE, ql.policy_fence) → the rule (FOR UPDATE) → its pending outbox rows.
create or replace function ql_api.notify_rule_remove_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_name text,
  p_admitted_project_version bigint,
  p_admitted_binding_version bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The row stays (removed_at_ms) as the history its deliveries name; the name is free for a new rule at once. A
-- pending notification of the rule ends dropped: a dispatcher holding it may still deliver it once (at least once
-- was promised only while the rule lived), and its result is then recorded as it comes.
declare
  v_fence jsonb;
  v_rule ql.notify_rules;
  v_now bigint;
  v_dropped integer;
begin
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[a-z0-9][a-z0-9._-]{0,63}$' then return ql.outcome('invalid', 'name'); end if;
  if p_admitted_project_version is null or p_admitted_binding_version is null then
    return ql.outcome('invalid', 'admitted_version');
  end if;
  v_fence := ql.policy_fence(p_subject_id, p_project_id, 'run.start', p_admitted_project_version,
                             p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;

  select * into v_rule from ql.notify_rules r
   where r.project_id = p_project_id and r.name = p_name and r.removed_at_ms is null for update;
  if v_rule.id is null then return ql.outcome('not_found', 'rule'); end if;
  v_now := ql.now_ms();
  update ql.notify_rules r set removed_at_ms = v_now, updated_at_ms = v_now where r.id = v_rule.id;
  update ql.notify_outbox o set state = 'dropped', ended_at_ms = v_now
   where o.rule_id = v_rule.id and o.state = 'pending';
  get diagnostics v_dropped = row_count;
  return jsonb_build_object('status', 'removed', 'name', v_rule.name, 'dropped', v_dropped);
end;
$$;

comment on function ql_api.notify_rule_remove_v1(uuid, uuid, text, bigint, bigint) is
'Returns removed {name, dropped} | invalid (subject_id, project_id, name, admitted_version) | not_found (project, '
'rule) | fenced (ql.policy_fence reasons). Raises nothing on input.';
grant execute on function ql_api.notify_rule_remove_v1(uuid, uuid, text, bigint, bigint) to ql_runtime;

commit;
