-- A task can be disabled by an operator (ql_api.task_status_set_v1): a disabled task is enqueued neither by a
-- user (ql_api.run_enqueue_v1 answers fenced, task_disabled) nor by the scheduler (ql_api.schedule_fire_v1
-- records skipped_inactive). Runs already queued or running are not touched. The fence reason is appended to
-- ql.fence_reason (whose order qinglong.wire.errors.FENCE_REASONS mirrors).
begin;
set local role ql_owner;

alter table ql.tasks add column status text not null default 'active' check (status in ('active', 'disabled'));
comment on column ql.tasks.status is 'active: Runs may be queued | disabled: neither users nor the scheduler queue Runs';
alter type ql.fence_reason add value if not exists 'task_disabled';

commit;
