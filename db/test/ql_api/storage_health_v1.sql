-- Tests ql_api.storage_health_v1, ql_api.retention_cycle_v1 and ql.retention_status: the partition horizon and its
-- warning long before writes could find no partition; the retention backlog a cycle leaves, how long the oldest
-- prunable Run has waited, and the alert once that is over a day; who may read what.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(16);

create function pg_temp.health() returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_runtime;
  v := ql_api.storage_health_v1();
  reset role;
  return v;
end $$;
create function pg_temp.cycle(p_started bigint, p_pages int, p_runs bigint, p_finished boolean) returns jsonb
language plpgsql as $$
declare v jsonb;
begin
  set local role ql_scheduler;
  v := ql_api.retention_cycle_v1(p_started, p_pages, p_runs, p_finished);
  reset role;
  return v;
end $$;

select function_privs_are('ql_api', 'storage_health_v1', array[]::text[], 'ql_runtime', array['EXECUTE'],
  'the shell''s role may read the storage health');
select function_privs_are('ql_api', 'retention_cycle_v1', array['bigint', 'integer', 'bigint', 'boolean'], 'ql_runtime',
  array[]::text[], 'but not record a retention cycle');
select ok(has_table_privilege('ql_readonly', 'ql.retention_status', 'select')
          and not has_table_privilege('ql_runtime', 'ql.retention_status', 'select'),
  'ql_readonly (not the runtime role) may read ql.retention_status');

-- A fresh database: 13 months of partitions ahead, no cycle, nothing to prune, no warning.
select is(pg_temp.health() - 'nowMs' - 'partitionHorizonMs',
  '{"status": "ok", "retentionBacklogRuns": 0, "lastRetentionCycleAtMs": null, "retentionBehindMs": 0, "warnings": []}'::jsonb,
  'a fresh database: no backlog, no warning');
select ok((pg_temp.health() ->> 'partitionHorizonMs')::bigint - ql.now_ms() > 390 * 86400000::bigint,
  'its partitions last more than 390 days');

-- Three terminal Runs past a 90-day retention, the oldest ended 92 days ago; one within it.
update ql.settings set run_retention_days = 90;
select pg_temp.mk_revision(pg_temp.mk_project()) as rev \gset
select pg_temp.mk_run(:'rev') as r1 \gset
select pg_temp.mk_run(:'rev') as r2 \gset
select pg_temp.mk_run(:'rev') as r3 \gset
select pg_temp.mk_run(:'rev') as r4 \gset
update ql.runs set status = 'succeeded', ended_at_ms = ql.now_ms() - 92 * 86400000::bigint where id = :'r1';
update ql.runs set status = 'succeeded', ended_at_ms = ql.now_ms() - 91 * 86400000::bigint where id in (:'r2', :'r3');
update ql.runs set status = 'succeeded', ended_at_ms = ql.now_ms() - 89 * 86400000::bigint where id = :'r4';
select is(pg_temp.cycle(ql.now_ms() - 1000, 1, 0, false) - 'status', '{"backlogRuns": 3}'::jsonb,
  'a cycle records the backlog it left: the three Runs past the retention');
select throws_ok($$select pg_temp.cycle(ql.now_ms() + 60000, 1, 0, true)$$, '22023', null,
  'a cycle that starts in the future is refused');
select throws_ok($$select pg_temp.cycle(ql.now_ms(), -1, 0, true)$$, '22023', null, 'as are negative pages');
select is((select count(*) from ql.retention_cycles), 1::bigint, 'and the refused ones recorded nothing');
select is(pg_temp.health() -> 'retentionBacklogRuns', '3'::jsonb, 'the health says the backlog of the last cycle');
select ok((pg_temp.health() ->> 'retentionBehindMs')::bigint between 2 * 86400000 - 60000 and 2 * 86400000 + 60000,
  'and how long the oldest prunable Run has waited (two days)');
select is(pg_temp.health() -> 'warnings', '["retention.behind"]'::jsonb, 'over a day: retention.behind');
select results_eq($$select backlog_runs, alert from ql.retention_status$$, $$values (3::bigint, true)$$,
  'ql.retention_status says the same, with its alert');

-- A day-old cycle with a smaller backlog: the view compares.
insert into ql.retention_cycles (started_at_ms, ended_at_ms, pages, runs_pruned, backlog_runs, finished)
values (ql.now_ms() - 86400000 - 5000, ql.now_ms() - 86400000 - 1000, 4, 1024, 1, false);
select results_eq($$select backlog_runs_a_day_before, last_cycle_runs_pruned, last_cycle_finished from ql.retention_status$$,
  $$values (1::bigint, 0::bigint, false)$$, 'the backlog a day before is beside the latest');

-- Partitions that end within 300 days: the horizon warning (maintenance stopped for about two months).
do $$
declare v record;
begin
  for v in select i.inhrelid::regclass as part, i.inhparent::regclass as parent from pg_inherits i
            where i.inhparent in ('ql.run_events'::regclass, 'ql.security_audit'::regclass)
              and ql.partition_upper_ms(i.inhrelid::regclass) > ql.now_ms() + 200 * 86400000::bigint loop
    execute format('alter table %s detach partition %s', v.parent, v.part);
  end loop;
end $$;
select is(pg_temp.health() -> 'warnings', '["partitions.horizon_near", "retention.behind"]'::jsonb,
  'partitions ending within 300 days: partitions.horizon_near');
update ql.runs set ended_at_ms = ql.now_ms() where id in (:'r1', :'r2', :'r3');
select is(pg_temp.health() -> 'warnings', '["partitions.horizon_near"]'::jsonb, 'nothing past retention: no retention.behind');

select * from finish();
rollback;
