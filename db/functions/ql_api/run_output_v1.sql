-- ql_api.run_output_v1: one byte-bounded page of an Attempt's output, as the CLI and the user API read it.
-- Lock order: none (one snapshot read).
create or replace function ql_api.run_output_v1(
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_no integer default null,  -- 1..100; NULL: the latest Attempt
  p_after_seq bigint default null,    -- the last seq of the previous page; NULL: from the first chunk
  p_max_bytes integer default null    -- 1..1048576; NULL: 262144
)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The Attempt (p_attempt_no, NULL: the Run's latest), its streams' totals and one page of its
-- chunks of both streams in arrival order (seq), after the cursor p_after_seq (the last seq read; NULL: from
-- the start). A page adds chunks while their data stays within p_max_bytes (1..1048576, NULL: 262144), at
-- least one when there is one, and at most 2048 chunks; more says whether later chunks exist.
-- Per stream: nextOffset (the bytes the task wrote that reached the database), keptBytes (the bytes stored:
-- nextOffset - keptBytes were dropped between the head and the tail, or expired) and headBytes (the current
-- setting). Chunks are {seq, stream, offset, data}: data is base64 on one line. A jump between a stream's
-- chunk end and its next chunk's offset is dropped output; chunks trimmed between two pages are simply
-- not seen (the offsets jump too).
-- A Run of another Project and a missing Run are the same not_found (run); a missing Attempt number is
-- not_found (attempt). A Run without an Attempt answers attempt null and empty lists. The Attempt names the Worker
-- that holds it by its name only (as project_workers_v1 does: never its id) and when it was claimed and started.
declare
  v_after bigint := coalesce(p_after_seq, 0);
  v_max integer := coalesce(p_max_bytes, 262144);
  v_run ql.runs;
  v_attempt ql.run_attempts;
  v_attempts integer;
  v_head integer;
  v_chunks jsonb;
  v_walk cursor (p_attempt uuid, p_after bigint) for
    select c.seq, octet_length(c.data) as len from ql.output_chunks c
     where c.attempt_id = p_attempt and c.seq > p_after order by c.seq;
  v_last bigint;
  v_count integer := 0;
  v_bytes bigint := 0;
  v_more boolean := false;
begin
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_run_id is null then return ql.outcome('invalid', 'run_id'); end if;
  if p_attempt_no not between 1 and 100 then return ql.outcome('invalid', 'attempt'); end if;
  if v_after < 0 then return ql.outcome('invalid', 'cursor'); end if;
  if v_max not between 1 and 1048576 then return ql.outcome('invalid', 'limit'); end if;

  select * into v_run from ql.runs r where r.id = p_run_id and r.project_id = p_project_id;
  if v_run.id is null then return ql.outcome('not_found', 'run'); end if;
  select count(*) into v_attempts from ql.run_attempts a where a.run_id = p_run_id;
  select * into v_attempt from ql.run_attempts a
   where a.run_id = p_run_id and (p_attempt_no is null or a.attempt_no = p_attempt_no)
   order by a.attempt_no desc limit 1;
  if v_attempt.id is null and p_attempt_no is not null then return ql.outcome('not_found', 'attempt'); end if;
  if v_attempt.id is null then
    return jsonb_build_object('status', 'output', 'runStatus', v_run.status, 'attempt', null, 'attempts', v_attempts,
                              'streams', '[]'::jsonb, 'chunks', '[]'::jsonb, 'more', false);
  end if;
  select st.output_head_bytes into v_head from ql.settings st;

  -- The page: the next chunks by seq, as many as fit in v_max bytes (the first always), at most 2048; meeting one
  -- more means more. A cursor (planned for its first rows) walks the index range in order and stops there.
  for v_chunk in v_walk(v_attempt.id, v_after) loop
    if v_count > 0 and (v_count = 2048 or v_bytes + v_chunk.len > v_max) then
      v_more := true;
      exit;
    end if;
    v_last := v_chunk.seq;
    v_bytes := v_bytes + v_chunk.len;
    v_count := v_count + 1;
  end loop;
  select coalesce(jsonb_agg(jsonb_build_object(
           'seq', c.seq, 'stream', c.stream, 'offset', c.byte_offset,
           'data', translate(encode(c.data, 'base64'), E'\n', '')) order by c.seq), '[]')
    into v_chunks
    from ql.output_chunks c
   where c.attempt_id = v_attempt.id and c.seq > v_after and c.seq <= v_last;

  return jsonb_build_object(
    'status', 'output',
    'runStatus', v_run.status,
    'attempt', jsonb_build_object(
      'attemptId', v_attempt.id, 'attemptNo', v_attempt.attempt_no, 'status', v_attempt.status,
      'exitCode', v_attempt.exit_code, 'errorCode', v_attempt.error_code, 'endedAtMs', v_attempt.ended_at_ms,
      'claimedAtMs', v_attempt.claimed_at_ms, 'startedAtMs', v_attempt.started_at_ms,
      'workerName', (select w.name from ql.workers w where w.id = v_attempt.worker_id)),
    'attempts', v_attempts,
    'streams', coalesce((
      select jsonb_agg(jsonb_build_object(
               'stream', s.stream, 'nextOffset', (select e.next_offset from ql.output_stream_end(s.attempt_id, s.stream) e),
               'headBytes', v_head,
               'keptBytes', (select coalesce(sum(octet_length(c.data)), 0) from ql.output_chunks c
                              where c.attempt_id = s.attempt_id and c.stream = s.stream)) order by s.stream)
        from ql.output_streams s where s.attempt_id = v_attempt.id), '[]'),
    'chunks', v_chunks,
    'more', v_more);
end;
$$;

comment on function ql_api.run_output_v1(uuid, uuid, integer, bigint, integer) is
'Returns output {runStatus, attempt, attempts, streams, chunks, more} | invalid (project_id, run_id, attempt, '
'cursor, limit) | not_found (run, also another Project''s; attempt). Raises nothing on input.';
grant execute on function ql_api.run_output_v1(uuid, uuid, integer, bigint, integer) to ql_runtime;
