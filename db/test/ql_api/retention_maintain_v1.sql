-- Tests ql_api.retention_maintain_v1, ql_api.partitions_ensure_v1 and the partitioning of ql/retention: run_events
-- and security_audit are partitioned by month and partitions exist 13 months ahead; an audit partition past
-- audit_retention_days is dropped whole; an event partition past run_retention_days is dropped only once no kept Run
-- has an event in it; one partition per call; NULL retention drops nothing; only the scheduler role may call them
-- (and ql_api.retain); ql.table_sizes is the DBA's.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(30);

create function pg_temp.maintain() returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_scheduler;
  v := ql_api.retention_maintain_v1();
  reset role;
  return v;
end $$;
create function pg_temp.ensure(p_months integer default 13) returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_scheduler;
  v := ql_api.partitions_ensure_v1(p_months);
  reset role;
  return v - 'horizonMs';
end $$;
-- The partitions of a table, by name.
create function pg_temp.parts(p_table regclass) returns text[] language sql
return (select array_agg(i.inhrelid::regclass::text order by i.inhrelid::regclass::text)
          from pg_inherits i where i.inhparent = p_table);
create function pg_temp.month(p_ahead integer) returns text language sql
return to_char(date_trunc('month', now() at time zone 'UTC') + p_ahead * interval '1 month', 'YYYYMM');

-- ---------------------------------------------------------------------------------------------
-- Structure.
select is_definer('ql_api', 'retention_maintain_v1', array[]::text[], 'retention_maintain_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'retention_maintain_v1', array[]::text[], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role may execute retention_maintain_v1');
select function_privs_are('ql_api', 'retention_maintain_v1', array[]::text[], 'ql_runtime', array[]::text[],
  'the runtime role may not');
select function_privs_are('ql_api', 'partitions_ensure_v1', array['integer'], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role may execute partitions_ensure_v1');
select function_privs_are('ql_api', 'partitions_ensure_v1', array['integer'], 'ql_runtime', array[]::text[],
  'the runtime role may not');
select function_privs_are('ql_api', 'retain', array['integer', 'integer'], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role may call ql_api.retain');
select function_privs_are('ql_api', 'retain', array['integer', 'integer'], 'ql_runtime', array[]::text[],
  'the runtime role may not');
select is((select relkind::text from pg_class where oid = 'ql.run_events'::regclass), 'p', 'run_events is partitioned');
select is((select relkind::text from pg_class where oid = 'ql.security_audit'::regclass), 'p', 'security_audit is partitioned');
select is(pg_get_partkeydef('ql.run_events'::regclass), 'RANGE (occurred_at_ms)', 'by range of occurred_at_ms');
select is(pg_get_partkeydef('ql.security_audit'::regclass), 'RANGE (at_ms)', 'and of at_ms');
select ok(has_table_privilege('ql_readonly', 'ql.table_sizes', 'select')
          and not has_table_privilege('ql_runtime', 'ql.table_sizes', 'select'),
  'ql_readonly (not the runtime role) may read ql.table_sizes');
select results_eq($$select table_name, partitions > 0, total_bytes > 0 from ql.table_sizes
                    where table_name in ('run_events', 'runs') order by 1$$,
  $$values ('run_events', true, true), ('runs', false, true)$$,
  'ql.table_sizes counts a partitioned table over its partitions');

-- ---------------------------------------------------------------------------------------------
-- Ahead: this month and the next 13 exist after deploy (writes work for a year without maintenance); a call
-- with 14 months creates the fifteenth of each, and the horizon moves with it.
select ok(pg_temp.parts('ql.run_events') @> array['ql.run_events_p' || pg_temp.month(0), 'ql.run_events_p' || pg_temp.month(13)]
          and pg_temp.parts('ql.security_audit') @> array['ql.security_audit_p' || pg_temp.month(13)]
          and not pg_temp.parts('ql.run_events') @> array['ql.run_events_p' || pg_temp.month(14)],
  'the partitions of this month and the next 13 exist');
select is(ql.partition_horizon_ms(),
  (extract(epoch from (date_trunc('month', now() at time zone 'UTC') + interval '14 months') at time zone 'UTC') * 1000)::bigint,
  'the horizon is the start of the 14th month ahead');
select throws_ok($$select pg_temp.ensure(25)$$, '22023', null, 'more than 24 months ahead is refused');
select pg_temp.parts('ql.run_events') as ev0 \gset
select is(pg_temp.ensure(14), '{"status": "ok", "created": 2}'::jsonb, 'fourteen months ahead creates one more of each');
select ok(pg_temp.parts('ql.run_events') @> (:'ev0'::text[] || ('ql.run_events_p' || pg_temp.month(14)))
          and cardinality(pg_temp.parts('ql.run_events')) = cardinality(:'ev0'::text[]) + 1,
  'the event partition of the 14th month ahead exists');
select is(pg_temp.ensure(14), '{"status": "ok", "created": 0}'::jsonb, 'a second call changes nothing');
select is(pg_temp.ensure(), '{"status": "ok", "created": 0}'::jsonb, 'nor does the default (13)');
select ok(exists (select from pg_trigger where tgrelid = ('ql.run_events_p' || pg_temp.month(14))::regclass
                   and tgname = 'run_events_p' || pg_temp.month(14) || '_no_truncate'),
  'a created partition refuses TRUNCATE as its parent does');
update ql.settings set run_retention_days = null, audit_retention_days = null;
select is(pg_temp.maintain(), '{"status": "ok", "dropped": null, "busy": []}'::jsonb, 'NULL retention drops nothing');

-- ---------------------------------------------------------------------------------------------
-- Audit: a row of 1970 lives in the history partition; past audit_retention_days (1) that partition goes whole.
insert into ql.security_audit (at_ms, route, decision, reason, request_id)
values (1000, 'old', 'allow', 'ok', 'r0'), (ql.now_ms(), 'now', 'allow', 'ok', 'r1');
update ql.settings set audit_retention_days = 1;
select is(pg_temp.maintain(), '{"status": "ok", "dropped": "ql.security_audit_phistory", "busy": []}'::jsonb,
  'the audit partition whose every row is older than the retention is dropped');
select is(pg_temp.maintain(), '{"status": "ok", "dropped": null, "busy": []}'::jsonb, 'then nothing more goes');
select results_eq($$select route from ql.security_audit$$, $$values ('now')$$, 'the recent audit row stays');

-- Events: a kept Run of 1970 with an event of 1970 keeps the history partition; once the Run is pruned, it goes.
-- (Events are never older than their Run by more than a day: ql.run_event_insert's bound, which the test of
-- "anything kept" relies on, so this Run is made in 1970 too.)
update ql.settings set run_retention_days = 1;
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as r \gset
update ql.runs set created_at_ms = 500 where id = :'r';
select ql.run_event(:'r', 'cancelled', 'run.cancelled', 'system', null, null, '{}', 1000, 'old-end') as seq \gset
select is((select tableoid::regclass::text from ql.run_events where run_id = :'r' and sequence = :seq),
  'ql.run_events_phistory', 'an event of 1970 lands in the history partition');
select is(pg_temp.maintain(), '{"status": "ok", "dropped": null, "busy": []}'::jsonb,
  'an event partition holding an event of a kept Run is not dropped');
update ql.runs set ended_at_ms = 1000 where id = :'r';
set local role ql_scheduler;
select is(ql_api.prune_v1(10) ->> 'runs', '1', 'the Run is pruned (its events stay)');
reset role;
select is(pg_temp.maintain(), '{"status": "ok", "dropped": "ql.run_events_phistory", "busy": []}'::jsonb,
  'then its partition, past the retention, is dropped whole');
select is((select count(*) from ql.run_events where run_id = :'r'), 1::bigint,
  'the Run''s events of this month stay in this month''s partition');

select * from finish();
rollback;
