-- Revert qinglong:ql/output_stream_end from pg
begin;
set local role ql_owner;
drop function ql.output_stream_end(uuid, ql.output_stream);
commit;
