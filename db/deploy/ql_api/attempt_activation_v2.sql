-- Deploy qinglong:ql_api/attempt_activation_v2 to pg
-- FROZEN COPY of db/functions/ql_api/attempt_activation_v2.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.attempt_activation_v2: attempt_activation_v1 with the start failure's message in words.
-- Lock order: ql.attempt_fence's (v1 takes every lock; the message is written under them).
create or replace function ql_api.attempt_activation_v2(
  p_phase text,                -- 'starting' | 'running' | 'start_failure'
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  p_error_code text,           -- start_failure only: why the process could not start (a stable code)
  p_error_message text         -- start_failure only, optional: the same in words, 1..200 characters
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Decides exactly as v1 (which stays for shells of the previous release) and answers what v1 answers. A start
-- failure that applied (the Attempt ended through ql.attempt_end) also keeps its message on the Attempt
-- (ql.run_attempts.error_message, shown by ql_api.run_timeline_v1 with the Attempt's end). A replayed start
-- failure answers already_terminal and writes nothing. A message with another phase, or outside 1..200
-- characters without control characters, is invalid (error_message) and nothing is read or written.
declare
  v_answer jsonb;
begin
  if p_error_message is not null
     and (p_phase is distinct from 'start_failure' or p_error_message !~ '^[^\x01-\x1f\x7f\u2028\u2029]{1,200}$') then
    return ql.outcome('invalid', 'error_message');
  end if;
  v_answer := ql_api.attempt_activation_v1(p_phase, p_worker_id, p_session_id, p_worker_generation, p_project_id,
                                           p_run_id, p_attempt_id, p_offer_id, p_lease_generation, p_token_digest,
                                           p_error_code);
  if p_error_message is not null and v_answer ->> 'status' = 'applied' then
    update ql.run_attempts a set error_message = p_error_message where a.id = p_attempt_id;
  end if;
  return v_answer;
end;
$$;

comment on function ql_api.attempt_activation_v2(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, text) is
'Returns attempt_activation_v1''s answer (applied | not_started | already_starting | already_running | '
'already_terminal with the snapshot and secrets | invalid | not_found | fenced), or invalid (error_message). '
'Raises what v1 raises (QLBUG on a pinned revision that does not join).';
grant execute on function ql_api.attempt_activation_v2(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, text) to ql_runtime;

commit;
