-- A task's output in the database: the Worker ships each stream (stdout, stderr) of an Attempt in bounded
-- chunks while the task runs (ql_api.output_append_v1), and users read it back (ql_api.run_output_v1).
-- Per stream the database keeps its HEAD (the first output_head_bytes) and its TAIL (at least the last
-- output_tail_bytes, at most one chunk more); the bytes between are dropped, so a 5 MB log keeps its first
-- and its last lines in bounded space. Nothing marks a gap: the offsets jump, and a reader sees where.
-- ql_api.output_expire_v1 (a page of ql_api.converge) deletes chunks older than output_retention_days.
-- ql_runtime touches neither table (only the SECURITY DEFINER functions do).
begin;
set local role ql_owner;

create type ql.output_stream as enum ('stdout', 'stderr');
comment on type ql.output_stream is 'The output streams of a task process.';

alter table ql.settings
  add column output_head_bytes integer not null default 524288 check (output_head_bytes between 0 and 16777216),
  add column output_tail_bytes integer not null default 524288 check (output_tail_bytes between 65536 and 16777216),
  add column output_retention_days integer default 30 check (output_retention_days between 1 and 3650);
comment on column ql.settings.output_head_bytes is
'Per output stream: the first bytes always kept. Once a stream has this many, the Worker may skip ahead (a gap).';
comment on column ql.settings.output_tail_bytes is
'Per output stream: at least the last bytes kept (at most one chunk more); older bytes past the head are deleted.';
comment on column ql.settings.output_retention_days is
'Output chunks older than this many days are deleted by convergence (ql_api.output_expire_v1). NULL: kept.';

create table ql.output_streams (
  attempt_id uuid not null references ql.run_attempts (id) on delete cascade,
  stream ql.output_stream not null,
  next_offset bigint not null default 0 check (next_offset between 0 and 9007199254740991),
  trimmed_to bigint not null default 0 check (trimmed_to between 0 and next_offset),
  primary key (attempt_id, stream)
);
comment on table ql.output_streams is
'One output stream of an Attempt that has sent output. Written when the stream starts and when retention deletes '
'chunks, never by an append: a row updated by every append would grow a chain of versions under any long open '
'snapshot, and every later append would walk it. Where the stream has reached is ql.output_stream_end.';
comment on column ql.output_streams.next_offset is
'The stream''s end as recorded when its chunks expired (0 before): its end is the greater of this and its newest '
'chunk''s end (ql.output_stream_end).';
comment on column ql.output_streams.trimmed_to is
'The trim watermark as recorded when its chunks expired (0 before); see ql.output_chunks.trim_from.';

create table ql.output_chunks (
  attempt_id uuid not null,
  stream ql.output_stream not null,
  byte_offset bigint not null check (byte_offset between 0 and 9007199254740991),
  data bytea not null check (pg_catalog.octet_length(data) between 1 and 262144),
  seq bigint generated always as identity,
  received_at_ms ql.ms not null,
  trim_from bigint not null default 0 check (trim_from >= 0),
  primary key (attempt_id, stream, byte_offset),
  foreign key (attempt_id, stream) references ql.output_streams (attempt_id, stream) on delete cascade
);
comment on table ql.output_chunks is
'Kept bytes of an output stream: a chunk never straddles the head boundary, and chunks never overlap. '
'data keeps the default storage (compressed, out of line when large): logs compress well.';
comment on column ql.output_chunks.byte_offset is 'Where data starts in the stream. A jump from the previous chunk''s end is dropped output.';
comment on column ql.output_chunks.data is 'The bytes, as the task wrote them (1..256 KiB).';
comment on column ql.output_chunks.seq is 'Global arrival order: a reader pages an Attempt''s chunks of both streams by it.';
comment on column ql.output_chunks.received_at_ms is 'Database time of the append that stored it (retention counts from it).';
comment on column ql.output_chunks.trim_from is
'Written by the append that stored it: every chunk of the stream past the head that starts below it was trimmed. '
'The next append''s trim starts at its newest chunk''s trim_from, at the first kept chunk, so a trim never walks '
'the index entries of chunks deleted before (which an open snapshot keeps from being cleaned up).';
create index output_chunks_attempt_seq_idx on ql.output_chunks (attempt_id, seq);
create index output_chunks_received_idx on ql.output_chunks (received_at_ms);
comment on index ql.output_chunks_attempt_seq_idx is 'ql_api.run_output_v1: an Attempt''s chunks in arrival order, after a cursor';
comment on index ql.output_chunks_received_idx is 'ql_api.output_expire_v1: the oldest chunks first';

commit;
