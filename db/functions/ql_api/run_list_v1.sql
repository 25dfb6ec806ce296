-- ql_api.run_list_v1: a Project's Runs, newest first, filtered by task, status and creation time, in keyset pages.
-- Lock order: none (one snapshot read).
create or replace function ql_api.run_list_v1(
  p_project_id uuid,
  p_task_id uuid default null,
  p_status text default null,
  p_since_ms bigint default null,    -- created_at_ms >= since
  p_until_ms bigint default null,    -- created_at_ms < until
  p_limit integer default null,      -- 1..100; NULL: 50
  p_cursor text default null         -- the nextCursor of the previous page
)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Newest first by (created_at_ms, id), filtered by task, status and a creation-time range [since, until), one
-- keyset page at a time. The key is immutable (a Run's creation time and id), so a
-- page is stable under concurrent inserts: a Run created later sorts before every cursor, never into a
-- later page, and no Run is skipped or repeated. The cursor is opaque to the client: base64url (no
-- padding) of the last row's created_at_ms (8 bytes, big-endian) and id (16 bytes), 32 characters;
-- nextCursor is null on the last page. A page holds p_limit (1..100, NULL = 50) Runs.
-- Each page is index range scans (ql/run_history_indexes, ql/lifecycle_lean): a status filter, the status index
-- (with the task, the task-and-status one); no status filter, the statuses the Project (or the task) has are
-- found first (ql.run_statuses: a skip scan, one index descent each) and their ranges of the same index merged newest first (a
-- Merge Append, each range read only as far as the page needs). The statement is built
-- from fixed fragments for the filters given (values travel as parameters, never as text; the statuses found are
-- literals of the domain), so each call is planned with its own filters. Another Project's Runs are never read.
-- Per Run: its task's name, its attempt count, startedAtMs (the first Attempt's starting ACK),
-- endedAtMs, the last Attempt's exit code and the cancel reason.
declare
  v_limit integer := coalesce(p_limit, 50);
  v_status ql.run_status;
  v_key bytea;
  v_after_ms bigint;
  v_after_id uuid;
  v_ids uuid[];
  v_last ql.runs;
  v_where text;
  v_statuses ql.run_status[];
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if v_limit not between 1 and 100 then return ql.outcome('invalid', 'limit'); end if;
  begin
    v_status := p_status;  -- the domain's CHECK is the one list of Run statuses
  exception when check_violation then
    return ql.outcome('invalid', 'status');
  end;
  if p_since_ms not between 0 and ql.max_safe_integer() or p_until_ms not between 0 and ql.max_safe_integer()
     or p_since_ms >= p_until_ms then
    return ql.outcome('invalid', 'time_range');
  end if;
  if p_cursor is not null then
    if p_cursor !~ '^[A-Za-z0-9_-]{32}$' then return ql.outcome('invalid', 'cursor'); end if;
    v_key := decode(translate(p_cursor, '-_', '+/'), 'base64');
    v_after_ms := ('x' || encode(substr(v_key, 1, 8), 'hex'))::bit(64)::bigint;
    v_after_id := encode(substr(v_key, 9, 16), 'hex')::uuid;
    if v_after_ms not between 0 and ql.max_safe_integer() then return ql.outcome('invalid', 'cursor'); end if;
  end if;

  v_statuses := case when v_status is null then ql.run_statuses(p_project_id, p_task_id)  -- one range per status
                     else array[v_status] end;
  v_where := ' where r.project_id = $1'
    || case when p_task_id is not null then ' and r.task_id = $2' else '' end
    || case when p_since_ms is not null then ' and r.created_at_ms >= $3' else '' end
    || case when p_until_ms is not null then ' and r.created_at_ms < $4' else '' end
    || case when p_cursor is not null then ' and (r.created_at_ms, r.id) < ($5, $6)' else '' end;
  -- One more than the page, to know whether there is a next one.
  execute 'select array(select u.id from ('
    || coalesce((select string_agg('(select r.id, r.created_at_ms from ql.runs r' || v_where
                                   || coalesce(' and r.status = ' || quote_literal(st::ql.run_status), '')
                                   || ' order by r.created_at_ms desc, r.id desc limit $7)', ' union all ')
                   from unnest(v_statuses) st), 'select null::uuid as id, null::bigint as created_at_ms where false')
    || ') u order by u.created_at_ms desc, u.id desc limit $7)'
    into v_ids
    using p_project_id, p_task_id, p_since_ms, p_until_ms, v_after_ms, v_after_id, v_limit + 1;

  if cardinality(v_ids) > v_limit then
    select * into v_last from ql.runs r where r.id = v_ids[v_limit];
  end if;
  return jsonb_build_object(
    'status', 'listed',
    'runs', coalesce((
      select jsonb_agg(jsonb_build_object(
               'runId', r.id, 'taskId', r.task_id, 'taskName', t.name, 'status', r.status,
               'attemptCount', r.attempt_count, 'createdAtMs', r.created_at_ms, 'startedAtMs', f.started_at_ms,
               'endedAtMs', r.ended_at_ms, 'exitCode', l.exit_code, 'cancelReason', r.cancel_reason)
             order by p.n)
        from unnest(v_ids[1:v_limit]) with ordinality p(id, n)
        join ql.runs r on r.id = p.id
        join ql.tasks t on t.id = r.task_id
        left join lateral (select a.started_at_ms from ql.run_attempts a
                            where a.run_id = r.id and a.started_at_ms is not null
                            order by a.attempt_no limit 1) f on true
        left join lateral (select a.exit_code from ql.run_attempts a
                            where a.run_id = r.id order by a.attempt_no desc limit 1) l on true), '[]'),
    'nextCursor', case when v_last.id is not null then
      translate(encode(int8send(v_last.created_at_ms) || uuid_send(v_last.id), 'base64'), '+/', '-_') end);
end;
$$;

comment on function ql_api.run_list_v1(uuid, uuid, text, bigint, bigint, integer, text) is
'Returns listed {runs, nextCursor} | invalid (project_id, limit, status, time_range, cursor). Raises nothing on '
'input.';
grant execute on function ql_api.run_list_v1(uuid, uuid, text, bigint, bigint, integer, text) to ql_runtime;
