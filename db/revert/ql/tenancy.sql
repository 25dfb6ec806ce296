-- Revert qinglong:ql/tenancy from pg
begin;
drop table ql.role_bindings;
drop table ql.subjects;
drop table ql.projects;
commit;
