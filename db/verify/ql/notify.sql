-- Verify qinglong:ql/notify on pg
select id, project_id, name, events, channel, url, secret_name, template, created_by, created_at_ms, updated_at_ms,
       removed_at_ms
  from ql.notify_rules where false;
select id, rule_id, project_id, kind, payload, state, attempts, created_at_ms, next_attempt_at_ms, ended_at_ms
  from ql.notify_outbox where false;
select outbox_id, attempt_no, ok, status_code, error, duration_ms, at_ms from ql.notify_deliveries where false;
select session_id, worker_id, seen_at_ms from ql.notify_offline_seen where false;
select notify_backoff_base_ms, notify_backoff_cap_ms, notify_max_attempts from ql.settings where false;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_roles where rolname = 'ql_notify' and rolcanlogin;
