-- Deploy qinglong:ql_api/notify_deliveries_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_deliveries_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_deliveries_v1: a Project's latest notifications, newest first, each with its delivery attempts (every role: run.read).
create or replace function ql_api.notify_deliveries_v1(p_project text, p_rule text, p_limit integer)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- At most p_limit (1..200) notifications of the Project (ql.notify_outbox_project_idx), of one rule by name when
-- p_rule is given (a removed rule's too), newest first; each with its state, attempts, next attempt time and every
-- attempt's status code, error code and duration. Reads only.
declare
  v_project ql.projects;
begin
  if p_project is null or length(p_project) not between 1 and 200 then return ql.outcome('invalid', 'project_id'); end if;
  if p_rule is not null and p_rule !~ '^[a-z0-9][a-z0-9._-]{0,63}$' then return ql.outcome('invalid', 'name'); end if;
  if p_limit is null or p_limit not between 1 and 200 then return ql.outcome('invalid', 'limit'); end if;
  v_project := ql.project_named(p_project);
  if v_project.id is null then return ql.outcome('not_found', 'project'); end if;
  return jsonb_build_object('status', 'listed', 'projectId', v_project.id, 'project', v_project.name, 'notifications',
    (select coalesce(jsonb_agg(n.item order by n.created_at_ms desc, n.id desc), '[]'::jsonb)
       from (select o.id, o.created_at_ms, jsonb_strip_nulls(jsonb_build_object(
                      'id', o.id, 'rule', r.name, 'kind', o.kind, 'state', o.state, 'attempts', o.attempts,
                      'createdAtMs', o.created_at_ms,
                      'nextAttemptAtMs', case when o.state = 'pending' then o.next_attempt_at_ms end,
                      'endedAtMs', o.ended_at_ms, 'runId', o.payload -> 'runId', 'taskId', o.payload -> 'taskId',
                      'deliveries', (select coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                                       'attemptNo', d.attempt_no, 'ok', d.ok, 'statusCode', d.status_code,
                                       'error', d.error, 'durationMs', d.duration_ms, 'atMs', d.at_ms))
                                       order by d.attempt_no), '[]'::jsonb)
                                       from ql.notify_deliveries d where d.outbox_id = o.id))) as item
               from ql.notify_outbox o join ql.notify_rules r on r.id = o.rule_id
              where o.project_id = v_project.id and (p_rule is null or r.name = p_rule)
              order by o.created_at_ms desc, o.id desc
              limit p_limit) n));
end;
$$;

comment on function ql_api.notify_deliveries_v1(text, text, integer) is
'Returns listed {projectId, project, notifications: [{id, rule, kind, state, attempts, createdAtMs, nextAttemptAtMs?, '
'endedAtMs?, runId?, taskId?, deliveries: [{attemptNo, ok, statusCode?, error?, durationMs, atMs}]}]} | invalid '
'(project_id, name, limit) | not_found (project). Raises nothing on input.';
grant execute on function ql_api.notify_deliveries_v1(text, text, integer) to ql_runtime;

commit;
