-- Revert qinglong:ql/partition_upper_ms from pg
begin;
set local role ql_owner;
drop function ql.partition_upper_ms(regclass);
commit;
