-- Tests ql_api.retention_maintain_v1 and the partitioning of ql/retention: run_events and security_audit are
-- partitioned by month and partitions exist ahead; an audit partition past audit_retention_days is dropped whole;
-- an event partition past run_retention_days is dropped only once no kept Run has an event in it; NULL retention
-- drops nothing; only the scheduler role may call it (and ql_api.retain); ql.table_sizes is the DBA's.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(23);

create function pg_temp.maintain(p_months integer default 2) returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_scheduler;
  v := ql_api.retention_maintain_v1(p_months);
  reset role;
  return v;
end $$;
-- The partitions of a table, by name.
create function pg_temp.parts(p_table regclass) returns text[] language sql
return (select array_agg(i.inhrelid::regclass::text order by i.inhrelid::regclass::text)
          from pg_inherits i where i.inhparent = p_table);
create function pg_temp.month(p_ahead integer) returns text language sql
return to_char(date_trunc('month', now() at time zone 'UTC') + p_ahead * interval '1 month', 'YYYYMM');

-- ---------------------------------------------------------------------------------------------
-- Structure.
select is_definer('ql_api', 'retention_maintain_v1', array['integer'], 'retention_maintain_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'retention_maintain_v1', array['integer'], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role may execute retention_maintain_v1');
select function_privs_are('ql_api', 'retention_maintain_v1', array['integer'], 'ql_runtime', array[]::text[],
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
-- Ahead: this month and the next two exist after deploy; a call with 3 months creates the fourth of each.
select ok(pg_temp.parts('ql.run_events') @> array['ql.run_events_p' || pg_temp.month(0), 'ql.run_events_p' || pg_temp.month(2)]
          and pg_temp.parts('ql.security_audit') @> array['ql.security_audit_p' || pg_temp.month(2)],
  'the partitions of this month and the next two exist');
select throws_ok($$select pg_temp.maintain(13)$$, '22023', null, 'more than 12 months ahead is refused');
update ql.settings set run_retention_days = null, audit_retention_days = null;
select pg_temp.parts('ql.run_events') as ev0, pg_temp.parts('ql.security_audit') as au0 \gset
select is(pg_temp.maintain(3), '{"status": "ok", "created": 2, "dropped": []}'::jsonb,
  'three months ahead creates one more partition of each; NULL retention drops nothing');
select ok(pg_temp.parts('ql.run_events') @> (:'ev0'::text[] || ('ql.run_events_p' || pg_temp.month(3)))
          and cardinality(pg_temp.parts('ql.run_events')) = cardinality(:'ev0'::text[]) + 1,
  'the event partition of the third month ahead exists');
select is(pg_temp.maintain(3), '{"status": "ok", "created": 0, "dropped": []}'::jsonb, 'a second call changes nothing');

-- ---------------------------------------------------------------------------------------------
-- Audit: a row of 1970 lives in the history partition; past audit_retention_days (1) that partition goes whole.
insert into ql.security_audit (at_ms, route, decision, reason, request_id)
values (1000, 'old', 'allow', 'ok', 'r0'), (ql.now_ms(), 'now', 'allow', 'ok', 'r1');
update ql.settings set audit_retention_days = 1;
select is(pg_temp.maintain(), '{"status": "ok", "created": 0, "dropped": ["ql.security_audit_phistory"]}'::jsonb,
  'the audit partition whose every row is older than the retention is dropped');
select results_eq($$select route from ql.security_audit$$, $$values ('now')$$, 'the recent audit row stays');

-- Events: a kept Run with an event of 1970 keeps the history partition; once the Run is pruned, it goes.
update ql.settings set run_retention_days = 1;
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as r \gset
select ql.run_event(:'r', 'cancelled', 'run.cancelled', 'system', null, null, '{}', 1000, 'old-end') as seq \gset
select is((select tableoid::regclass::text from ql.run_events where run_id = :'r' and sequence = :seq),
  'ql.run_events_phistory', 'an event of 1970 lands in the history partition');
select is(pg_temp.maintain(), '{"status": "ok", "created": 0, "dropped": []}'::jsonb,
  'an event partition holding an event of a kept Run is not dropped');
update ql.runs set ended_at_ms = 1000 where id = :'r';
set local role ql_scheduler;
select is(ql_api.prune_v1(10) ->> 'runs', '1', 'the Run is pruned (its events stay)');
reset role;
select is(pg_temp.maintain(), '{"status": "ok", "created": 0, "dropped": ["ql.run_events_phistory"]}'::jsonb,
  'then its partition, past the retention, is dropped whole');
select is((select count(*) from ql.run_events where run_id = :'r'), 1::bigint,
  'the Run''s events of this month stay in this month''s partition');

select * from finish();
rollback;
