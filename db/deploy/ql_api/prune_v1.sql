-- Deploy qinglong:ql_api/prune_v1 to pg
-- FROZEN COPY of db/functions/ql_api/prune_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.prune_v1: one bounded page of Run retention (docs/decisions/0009-retention.md).
-- Lock order: runs, then its Attempts' rows, artifacts, leases, secret receipts; then sessions; then mutations;
--   then bundles (FOR UPDATE SKIP LOCKED; their chunks go by cascade); then schedule fire times (no lock: never changed).
create or replace function ql_api.prune_v1(p_limit integer)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- With ql.settings.run_retention_days NULL steps 1 to 3 and 5 do nothing; otherwise the cutoff is now minus that many days, and:
-- 1. at most p_limit terminal Runs that ended before the cutoff, oldest first (ql.runs_ended_idx), none of whose
--    Attempts is live, are deleted with everything of theirs: their Attempts' artifacts, Leases and secret receipts, the
--    Attempts (their output goes with them, ON DELETE CASCADE) and the Runs. Their events stay in ql.run_events
--    until ql_api.retention_maintain_v1 drops the whole partition: nobody deletes an event row.
--    A Lease is kept as long as its Run: the replays of an ended Attempt (attempt_complete_v1's already_completed,
--    lease control's terminal answer) check the token against it;
-- 2. at most p_limit Worker sessions that ended (replaced, closed, expired) before the cutoff and made no offer
--    still kept;
-- 3. at most p_limit user mutations (the idempotency record) created before the cutoff: a mutation id replayed
--    later than the retention is a new mutation;
-- 4. whatever run_retention_days says, at most p_limit bundles whose upload began more than a day ago and that no
--    task revision names (an upload never sealed included), oldest first, with their chunks. A bundle a revision names
--    is kept for ever (revisions are). The candidates are locked first (FOR UPDATE SKIP LOCKED: an upload in progress
--    and a task_create_v1 naming the bundle hold its row) and the DELETE checks again, in a statement that starts
--    after those locks are held, that no revision names them: a revision committed meanwhile is seen there, and a
--    task_create_v1 that comes later waits for this transaction and then finds no bundle (not_found bundle).
-- 5. at most p_limit schedule fire times (ql.schedule_fires) older than the cutoff, oldest first
--    (schedule_fires_fire_idx): the scheduler's cursor is past them, so the exactly-once key of a fire time is needed
--    only while it could come round again; the table's DELETE guard refuses any newer one.
-- A Run, session or mutation another transaction holds is skipped, never waited for (FOR UPDATE SKIP LOCKED);
-- a Run's row lock is what every writer of the Run takes first, so nothing can start on a Run being pruned.
-- Sessions and mutations are found by a sequential scan that stops at p_limit (old rows come first in the heap).
declare
  v_days integer;
  v_cutoff bigint;
  v_runs uuid[];
  v_attempts uuid[];
  v_sessions integer := 0;
  v_mutations integer := 0;
  v_now bigint;
  v_bundles text[];
  v_bundles_deleted integer := 0;
  v_fires integer := 0;
begin
  if p_limit is null or p_limit not between 1 and 1024 then return ql.outcome('invalid', 'limit'); end if;
  select st.run_retention_days into v_days from ql.settings st;
  v_now := ql.now_ms();
  v_runs := '{}';
  if v_days is not null then
    v_cutoff := v_now - v_days::bigint * 86400000;

    select coalesce(array_agg(q.id), '{}') into v_runs
      from (select r.id from ql.runs r
             where r.ended_at_ms < v_cutoff
               and not exists (select 1 from ql.run_attempts a where a.run_id = r.id and a.ended_at_ms is null)
             order by r.ended_at_ms limit p_limit for update of r skip locked) q;
    if cardinality(v_runs) > 0 then
      select coalesce(array_agg(a.id), '{}') into v_attempts
        from (select a.id from ql.run_attempts a where a.run_id = any (v_runs) for update) a;
      delete from ql.artifacts x where x.attempt_id = any (v_attempts);
      delete from ql.run_leases l where l.attempt_id = any (v_attempts);
      delete from ql.attempt_secrets h where h.attempt_id = any (v_attempts);
      update ql.runs r set current_attempt_id = null where r.id = any (v_runs) and r.current_attempt_id is not null;
      delete from ql.run_attempts a where a.id = any (v_attempts);
      delete from ql.runs r where r.id = any (v_runs);
    end if;

    delete from ql.worker_sessions s
     using (select w.id from ql.worker_sessions w
             where w.ended_at_ms < v_cutoff
               and not exists (select 1 from ql.run_attempts a where a.session_id = w.id)
             limit p_limit for update skip locked) old
     where s.id = old.id;
    get diagnostics v_sessions = row_count;

    delete from ql.mutations m
     using (select n.subject_id, n.mutation_id from ql.mutations n
             where n.created_at_ms < v_cutoff limit p_limit for update skip locked) old
     where m.subject_id = old.subject_id and m.mutation_id = old.mutation_id;
    get diagnostics v_mutations = row_count;

    delete from ql.schedule_fires f
     using (select g.task_id, g.fire_at_ms from ql.schedule_fires g
             where g.fire_at_ms < v_cutoff order by g.fire_at_ms limit p_limit) old
     where f.task_id = old.task_id and f.fire_at_ms = old.fire_at_ms;
    get diagnostics v_fires = row_count;
  end if;

  select coalesce(array_agg(q.digest), '{}') into v_bundles
    from (select b.digest from ql.bundles b
           where b.created_at_ms < v_now - 86400000
             and not exists (select 1 from ql.task_execution_revisions r
                              where r.plan_json ? 'bundle' and r.plan_json ->> 'bundle' = b.digest)
           order by b.created_at_ms limit p_limit for update of b skip locked) q;
  if cardinality(v_bundles) > 0 then
    delete from ql.bundles b
     where b.digest = any (v_bundles)
       and not exists (select 1 from ql.task_execution_revisions r
                        where r.plan_json ? 'bundle' and r.plan_json ->> 'bundle' = b.digest);
    get diagnostics v_bundles_deleted = row_count;
  end if;

  return jsonb_build_object('status', 'ok', 'runs', cardinality(v_runs), 'sessions', v_sessions,
                            'mutations', v_mutations, 'bundles', v_bundles_deleted, 'fires', v_fires);
end;
$$;

comment on function ql_api.prune_v1(integer) is
'Returns ok {runs, sessions, mutations, bundles, fires} (rows deleted; all but bundles 0 when '
'run_retention_days is NULL) | invalid (limit: 1..1024). Raises nothing on input.';
grant execute on function ql_api.prune_v1(integer) to ql_scheduler;

commit;
