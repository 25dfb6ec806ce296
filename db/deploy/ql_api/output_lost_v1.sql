-- Deploy qinglong:ql_api/output_lost_v1 to pg
-- FROZEN COPY of db/functions/ql_api/output_lost_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.output_lost_v1: a Worker says output of an Attempt it held never reached the database (an output.lost event).
-- Lock order: ql.attempt_fence's (advisory lock on the Attempt → run).
create or replace function ql_api.output_lost_v1(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  p_stream text,
  p_written_bytes bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- When an Attempt's Lease ran out on its Worker (the task stopped at its local expiry) the output the Worker still
-- held is appended while ql_api.output_append_v1 takes it; once that refuses it (the Lease expired, the Attempt is
-- lost), the Worker calls this, per stream, so that the Run's history says output went missing instead of a stream
-- that silently ends (docs/decisions/0028-lease-length-per-pool.md). Under the identity part of the fence
-- (session, generation, offer, lease generation, token digest): neither a live Lease nor a live Attempt is needed,
-- since the point is an Attempt that ended without its Worker. One event per Attempt and stream, output.lost
-- {attemptNo, stream, writtenBytes (what the task wrote, as the Worker counted it before masking), storedBytes (the
-- end of the stream the database holds, masked bytes)}; a second call answers already_recorded with what the
-- first recorded and writes nothing. It stores no output and changes no status.
declare
  f record;
  v_key text;
  v_stored bigint;
  v_payload jsonb;
begin
  if p_stream is null or p_stream not in ('stdout', 'stderr') then return ql.outcome('invalid', 'stream'); end if;
  if p_written_bytes is null or p_written_bytes not between 0 and ql.max_safe_integer() then
    return ql.outcome('invalid', 'size');
  end if;
  select * into f from ql.attempt_fence(p_worker_id, p_session_id, p_worker_generation, p_project_id, p_run_id,
                                        p_attempt_id, p_offer_id, p_lease_generation, p_token_digest);
  if f.outcome is not null then return f.outcome; end if;

  v_key := 'output.lost:' || p_attempt_id::text || ':' || p_stream;
  select e.payload into v_payload from ql.run_events e where e.run_id = p_run_id and e.dedupe_key = v_key;
  if found then
    return jsonb_build_object('status', 'already_recorded', 'stream', p_stream,
                              'writtenBytes', v_payload -> 'writtenBytes', 'storedBytes', v_payload -> 'storedBytes');
  end if;
  select coalesce((select e.next_offset from ql.output_stream_end(p_attempt_id, p_stream::ql.output_stream) e), 0)
    into v_stored;
  v_payload := jsonb_build_object('attemptNo', (f.attempt).attempt_no, 'stream', p_stream,
                                  'writtenBytes', p_written_bytes, 'storedBytes', v_stored);
  perform ql.run_event(p_run_id, null, 'output.lost', 'worker', p_worker_id, p_attempt_id, v_payload, f.now_ms, v_key);
  return jsonb_build_object('status', 'recorded', 'stream', p_stream,
                            'writtenBytes', p_written_bytes, 'storedBytes', v_stored);
end;
$$;

comment on function ql_api.output_lost_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bigint) is
'Returns recorded | already_recorded {stream, writtenBytes, storedBytes} | invalid (stream, size, ql.attempt_fence '
'reasons) | not_found (offer) | fenced (ql.attempt_fence reasons); never the token or its digest. Raises nothing on '
'input.';
grant execute on function ql_api.output_lost_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bigint) to ql_runtime;

commit;
