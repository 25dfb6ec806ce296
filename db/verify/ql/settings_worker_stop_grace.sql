-- Verify qinglong:ql/settings_worker_stop_grace on pg
select worker_stop_grace_ms from ql.settings where false;
