-- Revert qinglong:ql/partition_ensure from pg
begin;
set local role ql_owner;
drop function ql.partition_ensure(regclass, bigint, integer);
commit;
