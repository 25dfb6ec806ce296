-- Deploy qinglong:ql_api/run_timeline_v2 to pg
-- FROZEN COPY of db/functions/ql_api/run_timeline_v2.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.run_timeline_v2: run_timeline_v1, with the words of a start failure beside its code.
-- Lock order: none (one snapshot read).
create or replace function ql_api.run_timeline_v2(p_project_id uuid, p_run_id uuid)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- v1's answer (v1 stays for shells of the previous release), in which the end of each Attempt that could not
-- start (its event attempt.failed, attempt.cancelled or attempt.timed_out) shows, beside its errorCode, the
-- errorMessage its Worker gave (ql.run_attempts.error_message, kept by ql_api.attempt_activation_v2). The stored
-- event stays as it was written; the answer's shape is v1's (a payload is JSON text).
declare
  v_answer jsonb := ql_api.run_timeline_v1(p_project_id, p_run_id);
begin
  if v_answer ->> 'status' is distinct from 'found'
     or not exists (select from ql.run_attempts a where a.run_id = p_run_id and a.error_message is not null) then
    return v_answer;
  end if;
  return jsonb_set(v_answer, '{events}', (
    select coalesce(jsonb_agg(case when a.error_message is null then e.event
                                   else jsonb_set(e.event, '{payload}', to_jsonb(((e.event ->> 'payload')::jsonb
                                          || jsonb_build_object('errorMessage', a.error_message))::text)) end
                              order by e.n), '[]')
      from jsonb_array_elements(v_answer -> 'events') with ordinality e(event, n)
      left join ql.run_attempts a
        on a.id = (e.event ->> 'attemptId')::uuid and a.run_id = p_run_id
       and e.event ->> 'type' in ('attempt.failed', 'attempt.cancelled', 'attempt.timed_out')));
end;
$$;

comment on function ql_api.run_timeline_v2(uuid, uuid) is
'Returns run_timeline_v1''s answer (found {run, events, truncated} | invalid | not_found), with errorMessage in '
'the payload of the end of an Attempt that could not start. Raises nothing on input.';
grant execute on function ql_api.run_timeline_v2(uuid, uuid) to ql_runtime;

commit;
