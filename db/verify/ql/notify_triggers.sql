-- Verify qinglong:ql/notify_triggers on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_trigger
where tgrelid = 'ql.run_events'::regclass and tgname = 'run_events_notify';
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_trigger
where tgrelid = 'ql.schedule_fires'::regclass and tgname = 'schedule_fires_notify';
