-- Verify qinglong:ql/output on pg
select output_head_bytes, output_tail_bytes, output_retention_days from ql.settings where false;
select attempt_id, stream, next_offset, trimmed_to from ql.output_streams where false;
select attempt_id, stream, byte_offset, data, seq, received_at_ms, trim_from from ql.output_chunks where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_indexes
where schemaname = 'ql' and indexname in ('output_chunks_attempt_seq_idx', 'output_chunks_received_idx')
having pg_catalog.count(*) = 2;
select 1 / (not pg_catalog.has_table_privilege('ql_runtime', 'ql.output_streams', 'select'))::int;
select 1 / (not pg_catalog.has_table_privilege('ql_runtime', 'ql.output_chunks', 'select'))::int;
