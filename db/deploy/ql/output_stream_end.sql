-- Deploy qinglong:ql/output_stream_end to pg
-- FROZEN COPY of db/functions/ql/output_stream_end.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.output_stream_end: where one output stream has reached and where its next trim starts.
create or replace function ql.output_stream_end(p_attempt_id uuid, p_stream ql.output_stream)
returns table (next_offset bigint, trimmed_to bigint)
language sql
stable
-- The greater of what its ql.output_streams row recorded (when it started, and when retention deleted chunks) and
-- what its newest chunk says (its end; its trim_from): an append writes only chunks. The newest chunk is the top of
-- the primary key's range of the stream, which trims never touch: one index descent, however many chunks were
-- deleted below it. No row for the stream: no row.
begin atomic
  select greatest(s.next_offset, coalesce(c.chunk_end, 0)), greatest(s.trimmed_to, coalesce(c.trim_from, 0))
    from ql.output_streams s
    left join lateral (select c.byte_offset + pg_catalog.octet_length(c.data) as chunk_end, c.trim_from
                         from ql.output_chunks c
                        where c.attempt_id = s.attempt_id and c.stream = s.stream
                        order by c.byte_offset desc limit 1) c on true
   where s.attempt_id = p_attempt_id and s.stream = p_stream;
end;

comment on function ql.output_stream_end(uuid, ql.output_stream) is
'Returns the stream''s end (bytes received, kept or dropped) and its trim watermark; no row when the stream has '
'none. Never raises.';

commit;
