-- Deploy qinglong:ql_api/output_expire_v1 to pg
-- FROZEN COPY of db/functions/ql_api/output_expire_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.output_expire_v1: one bounded page of output retention.
-- Lock order: chunks (FOR UPDATE SKIP LOCKED), then streams (FOR UPDATE SKIP LOCKED).
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
--    ql.output_chunks_received_idx), whatever their Attempt's state;
-- 2. at most p_limit ql.output_streams rows of ended Attempts whose every chunk is gone are deleted, oldest
--    first. Every chunk of a stream is at most as old as the stream's updated_at_ms, so a stream updated before
--    the oldest chunk left (and before the cutoff) has none: one range of ql.output_streams_updated_idx.
--    A running Attempt keeps its streams (their next_offset) even when retention emptied them.
-- Rows another transaction holds are skipped, never waited for.
declare
  v_days integer;
  v_cutoff bigint;
  v_bound bigint;
  v_chunks integer := 0;
  v_streams integer := 0;
begin
  if p_limit is null or p_limit not between 1 and 1024 then return ql.outcome('invalid', 'limit'); end if;
  select st.output_retention_days into v_days from ql.settings st;
  if v_days is null then
    return jsonb_build_object('status', 'ok', 'deleted', 0, 'streamsDeleted', 0);
  end if;
  v_cutoff := ql.now_ms() - v_days::bigint * 86400000;

  delete from ql.output_chunks c
   using (select d.attempt_id, d.stream, d.byte_offset from ql.output_chunks d
           where d.received_at_ms < v_cutoff
           order by d.received_at_ms limit p_limit for update skip locked) old
   where c.attempt_id = old.attempt_id and c.stream = old.stream and c.byte_offset = old.byte_offset;
  get diagnostics v_chunks = row_count;

  v_bound := least(v_cutoff, (select min(c.received_at_ms) from ql.output_chunks c));
  delete from ql.output_streams s
   using (select e.attempt_id, e.stream from ql.output_streams e
           where e.updated_at_ms < v_bound
             and exists (select 1 from ql.run_attempts a where a.id = e.attempt_id and a.ended_at_ms is not null)
             and not exists (select 1 from ql.output_chunks c where c.attempt_id = e.attempt_id and c.stream = e.stream)
           order by e.updated_at_ms limit p_limit for update skip locked) empty
   where s.attempt_id = empty.attempt_id and s.stream = empty.stream;
  get diagnostics v_streams = row_count;

  return jsonb_build_object('status', 'ok', 'deleted', v_chunks, 'streamsDeleted', v_streams);
end;
$$;

comment on function ql_api.output_expire_v1(integer) is
'Returns ok {deleted (chunks), streamsDeleted} (both 0 when output_retention_days is NULL) | invalid (limit: '
'1..1024). Raises nothing on input.';
grant execute on function ql_api.output_expire_v1(integer) to ql_scheduler;

commit;
