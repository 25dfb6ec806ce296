-- Revert qinglong:ql/audit from pg
begin;
drop table ql.mutations;
drop table ql.security_audit;
commit;
