-- Revert qinglong:ql/runs from pg
begin;
drop table ql.artifacts;
drop table ql.run_events;
drop table ql.offers;
drop table ql.run_leases;
alter table ql.runs drop column current_attempt_id;
drop table ql.run_attempts;
drop table ql.runs;
commit;
