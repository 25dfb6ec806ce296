-- ql_api.output_expire_v1: one bounded page of output retention.
-- Lock order: chunks (FOR UPDATE SKIP LOCKED), then their streams' rows (UPDATE, then DELETE).
create or replace function ql_api.output_expire_v1(p_limit integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- ql_api.converge calls it last, after its other pages.
-- With ql.settings.output_retention_days NULL it does nothing; otherwise the cutoff is now minus that
-- many days, and:
-- 1. at most p_limit chunks received before the cutoff are deleted, oldest first (one range of
--    ql.output_chunks_received_idx), whatever their Attempt's state; each stream they belonged to records on its
--    ql.output_streams row the end and trim watermark of its deleted chunks, in the same statement, so the stream's
--    end (ql.output_stream_end) is the same before and after, also when its newest chunk went;
-- 2. those streams of ended Attempts whose every chunk is now gone are deleted (streamsDeleted). A running
--    Attempt keeps its streams (their end) even when retention emptied them; an Attempt that ends later keeps its
--    empty stream rows until its Run is pruned (ql_api.prune_v1, by cascade).
-- Rows another transaction holds are skipped, never waited for.
declare
  v_days integer;
  v_cutoff bigint;
  v_attempts uuid[];
  v_streams_touched ql.output_stream[];
  v_ends bigint[];
  v_trims bigint[];
  v_chunks integer := 0;
  v_streams integer := 0;
begin
  if p_limit is null or p_limit not between 1 and 1024 then return ql.outcome('invalid', 'limit'); end if;
  select st.output_retention_days into v_days from ql.settings st;
  if v_days is null then
    return jsonb_build_object('status', 'ok', 'deleted', 0, 'streamsDeleted', 0);
  end if;
  v_cutoff := ql.now_ms() - v_days::bigint * 86400000;

  with gone as (
    delete from ql.output_chunks c
     using (select d.attempt_id, d.stream, d.byte_offset from ql.output_chunks d
             where d.received_at_ms < v_cutoff
             order by d.received_at_ms limit p_limit for update skip locked) old
     where c.attempt_id = old.attempt_id and c.stream = old.stream and c.byte_offset = old.byte_offset
    returning c.attempt_id, c.stream, c.byte_offset + octet_length(c.data) as chunk_end, c.trim_from),
  per_stream as (
    select g.attempt_id, g.stream, max(g.chunk_end) as chunk_end, max(g.trim_from) as trim_from, count(*) as n
      from gone g group by g.attempt_id, g.stream)
  select coalesce(array_agg(p.attempt_id), '{}'), coalesce(array_agg(p.stream), '{}'),
         coalesce(array_agg(p.chunk_end), '{}'), coalesce(array_agg(p.trim_from), '{}'), coalesce(sum(p.n), 0)
    into v_attempts, v_streams_touched, v_ends, v_trims, v_chunks
    from per_stream p;

  -- The streams' rows, by key (the arrays hold at most p_limit streams).
  update ql.output_streams s
     set next_offset = greatest(s.next_offset, u.chunk_end), trimmed_to = greatest(s.trimmed_to, u.trim_from)
    from unnest(v_attempts, v_streams_touched, v_ends, v_trims) u(attempt_id, stream, chunk_end, trim_from)
   where s.attempt_id = u.attempt_id and s.stream = u.stream;
  delete from ql.output_streams s
   using unnest(v_attempts, v_streams_touched) u(attempt_id, stream)
   where s.attempt_id = u.attempt_id and s.stream = u.stream
     and exists (select 1 from ql.run_attempts a where a.id = s.attempt_id and a.ended_at_ms is not null)
     and not exists (select 1 from ql.output_chunks c where c.attempt_id = s.attempt_id and c.stream = s.stream);
  get diagnostics v_streams = row_count;

  return jsonb_build_object('status', 'ok', 'deleted', v_chunks, 'streamsDeleted', v_streams);
end;
$$;

comment on function ql_api.output_expire_v1(integer) is
'Returns ok {deleted (chunks), streamsDeleted} (both 0 when output_retention_days is NULL) | invalid (limit: '
'1..1024). Raises nothing on input.';
grant execute on function ql_api.output_expire_v1(integer) to ql_scheduler;
