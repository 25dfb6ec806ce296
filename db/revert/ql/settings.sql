-- Revert qinglong:ql/settings from pg
begin;
drop table ql.settings;
commit;
