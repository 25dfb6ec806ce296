-- Revert qinglong:ql/output from pg
begin;
set local role ql_owner;

drop table ql.output_chunks;
drop table ql.output_streams;
alter table ql.settings drop column output_retention_days, drop column output_tail_bytes, drop column output_head_bytes;
drop type ql.output_stream;

commit;
