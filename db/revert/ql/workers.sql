-- Revert qinglong:ql/workers from pg
begin;
drop table ql.worker_sessions;
drop table ql.workers;
commit;
