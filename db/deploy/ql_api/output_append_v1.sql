-- Deploy qinglong:ql_api/output_append_v1 to pg
-- FROZEN COPY of db/functions/ql_api/output_append_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.output_append_v1: store a chunk of a live Attempt's stdout or stderr, keeping each stream's head and tail.
-- Lock order: ql.attempt_fence's (its advisory lock on the Attempt serializes the appends of both its streams); the
--   stream's ql.output_streams row is inserted by the first append and never updated by one.
create or replace function ql_api.output_append_v1(
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
  p_offset bigint,
  p_data bytea
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The chunk is p_data at byte p_offset of the stream.
-- Per stream the database keeps the HEAD (bytes below ql.settings.output_head_bytes) and the TAIL (at least
-- the last output_tail_bytes, at most one chunk more); bytes between are deleted as the stream grows, so a
-- 5 MB log keeps its first and its last lines. The stream's end (ql.output_stream_end: its newest chunk's end, or what
-- its row recorded) is next_offset, the end of what arrived:
-- * p_offset + length <= next_offset: bytes already held (an exact replay, or a Worker that restarted from
--   an earlier offset): nothing changes and the answer is the same, also after the Attempt ended;
-- * p_offset < next_offset < p_offset + length: only the new suffix (from next_offset) is stored;
-- * p_offset > next_offset: a gap, allowed only once the head is complete (next_offset >= head): the Worker
--   skipped ahead to keep only the tail, the skipped bytes are dropped and the offsets jump; before that,
--   invalid (offset).
-- A chunk never straddles the head boundary (an append across it is stored as two chunks). Then the tail is
-- trimmed, before the new bytes are stored: this stream's chunks at or above the head that end at or before the new
-- end - output_tail_bytes are deleted (one range of the primary key), from the stream's trim watermark on: every
-- chunk below it is already gone, so the range starts at the first kept chunk and never walks the index entries of
-- chunks deleted before, which an open snapshot elsewhere (a report, pg_dump) keeps from being cleaned up. The new
-- chunk records the watermark after this trim (trim_from). An append writes only chunks: the cost of an append is
-- its own chunks, however long the stream and whatever snapshot is open.
-- Storing needs the Attempt live (starting or running, else fenced state_drift) and its Lease unexpired
-- (else fenced lease_expired), as ql_api.artifact_upload_v1 does for a new artifact.
-- Input is checked before any lock; invalid input changes nothing.
declare
  f record;
  v_stream ql.output_stream;
  v_head bigint;
  v_tail bigint;
  v_next bigint;
  v_start bigint;
  v_data bytea;
  v_end bigint;
  v_cut integer;
  v_from bigint;
  v_trimmed bigint;
begin
  if p_stream is null or p_stream not in ('stdout', 'stderr') then return ql.outcome('invalid', 'stream'); end if;
  if p_offset is null or p_offset not between 0 and ql.max_safe_integer() then return ql.outcome('invalid', 'offset'); end if;
  if p_data is null or octet_length(p_data) not between 1 and 262144 then return ql.outcome('invalid', 'size'); end if;
  if p_offset + octet_length(p_data) > ql.max_safe_integer() then return ql.outcome('invalid', 'offset'); end if;
  v_stream := p_stream::ql.output_stream;

  select * into f from ql.attempt_fence(p_worker_id, p_session_id, p_worker_generation, p_project_id,
                                        p_run_id, p_attempt_id, p_offer_id, p_lease_generation, p_token_digest);
  if f.outcome is not null then return f.outcome; end if;

  select st.output_head_bytes, st.output_tail_bytes into v_head, v_tail from ql.settings st;
  select e.next_offset, e.trimmed_to into v_next, v_from from ql.output_stream_end(p_attempt_id, v_stream) e;
  v_next := coalesce(v_next, 0);
  if p_offset + octet_length(p_data) > v_next then
    if (f.attempt).status not in ('starting', 'running') then return ql.outcome('fenced', 'state_drift'); end if;
    if (f.lease).expires_at_ms <= f.now_ms then return ql.outcome('fenced', 'lease_expired'); end if;
    if p_offset > v_next and v_next < v_head then return ql.outcome('invalid', 'offset'); end if;

    if v_from is null then  -- the stream's first bytes
      insert into ql.output_streams (attempt_id, stream) values (p_attempt_id, v_stream);
      v_from := 0;
    end if;

    v_start := greatest(p_offset, v_next);
    v_data := substr(p_data, (v_start - p_offset + 1)::integer);
    v_end := v_start + octet_length(v_data);
    -- byte_offset < end - tail bounds the range scan; the length condition keeps a chunk that reaches into the tail.
    with trimmed as (
      delete from ql.output_chunks c
       where c.attempt_id = p_attempt_id and c.stream = v_stream
         and c.byte_offset >= greatest(v_from, v_head) and c.byte_offset < v_end - v_tail
         and c.byte_offset + octet_length(c.data) <= v_end - v_tail
      returning c.byte_offset + octet_length(c.data) as chunk_end)
    select max(t.chunk_end) into v_trimmed from trimmed t;
    v_from := greatest(v_from, coalesce(v_trimmed, 0));
    if v_start < v_head then  -- the head part, then (if any) the rest from the boundary
      v_cut := least(octet_length(v_data)::bigint, v_head - v_start)::integer;
      insert into ql.output_chunks (attempt_id, stream, byte_offset, data, received_at_ms, trim_from)
      values (p_attempt_id, v_stream, v_start, substr(v_data, 1, v_cut), f.now_ms, v_from);
      if v_cut < octet_length(v_data) then
        insert into ql.output_chunks (attempt_id, stream, byte_offset, data, received_at_ms, trim_from)
        values (p_attempt_id, v_stream, v_head, substr(v_data, v_cut + 1), f.now_ms, v_from);
      end if;
    else
      insert into ql.output_chunks (attempt_id, stream, byte_offset, data, received_at_ms, trim_from)
      values (p_attempt_id, v_stream, v_start, v_data, f.now_ms, v_from);
    end if;
    v_next := v_end;
  end if;

  return jsonb_build_object('status', 'appended', 'stream', p_stream, 'nextOffset', v_next,
                            'headBytes', v_head, 'tailBytes', v_tail);
end;
$$;

comment on function ql_api.output_append_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bigint, bytea) is
'Returns appended {stream, nextOffset, headBytes, tailBytes} | invalid (stream, offset, size, the fence''s '
'inputs) | not_found | fenced (ql.attempt_fence reasons, state_drift, lease_expired). Raises nothing on input.';
grant execute on function ql_api.output_append_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bigint, bytea) to ql_runtime;

commit;
