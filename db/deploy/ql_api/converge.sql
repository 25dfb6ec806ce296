-- Deploy qinglong:ql_api/converge to pg
-- FROZEN COPY of db/functions/ql_api/converge.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.converge: one convergence cycle: pages of cancellation, lease expiry, the scheduler and output retention.
create or replace procedure ql_api.converge(
  p_page_size integer default 64,
  p_max_pages integer default 16,
  p_grace_ms bigint default 30000
)
language plpgsql
as $$
-- In order: ql_api.run_cancellation_converge_v1, ql_api.lease_expiry_reconcile_v1, ql_api.schedule_fire_v1 (due
-- schedule fire times become Runs), ql_api.output_expire_v1 (chunks older than output_retention_days), then
-- ql_api.partitions_ensure_v1 (partitions 13 months ahead, also when the retention cycle stops running), each
-- page its own short transaction (COMMIT between pages), stopping early on a short page (or, for
-- convergence, a page that converged nothing: only blocked Runs are left). The scheduler and retention come
-- last, so a fault in them can delay fire times or deletions but never the recovery of Runs.
-- pg_cron runs it as ql_scheduler (`CALL ql_api.converge()`); an operator may CALL it once by hand.
-- The one routine that is NOT SECURITY DEFINER: PostgreSQL refuses COMMIT inside a SECURITY DEFINER
-- procedure or one with a SET clause ("invalid transaction termination"), so it runs as its caller,
-- qualifies every name, and only calls the SECURITY DEFINER functions named above and the floor of its grace.
-- Call it outside an explicit transaction block (CALL in autocommit mode), or the COMMITs fail.
-- Bounds: p_page_size 1..128, p_max_pages 1..64, p_grace_ms 0..86400000 and at least its floor,
-- ql_api.converge_grace_floor_v1 (the Workers' stop grace + the runner's 1 s poll: a shorter grace would declare
-- lost, and retry elsewhere, a Run whose task may still be stopping). Never a per-Run timer.
declare
  v_page jsonb;
  v_pages integer;
  v_floor bigint;
begin
  if p_page_size is null or p_page_size not between 1 and 128
     or p_max_pages is null or p_max_pages not between 1 and 64
     or p_grace_ms is null or p_grace_ms not between 0 and 86400000 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.converge: bounds out of range (page_size %s, max_pages %s, grace_ms %s)',
                                  p_page_size, p_max_pages, p_grace_ms);
  end if;
  v_floor := ql_api.converge_grace_floor_v1();
  if p_grace_ms < v_floor then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.converge: grace_ms %s is below its floor %s '
                                  '(ql.settings.worker_stop_grace_ms %s + 1000)', p_grace_ms, v_floor, v_floor - 1000),
      hint = 'Give a grace of at least the floor, or lower ql.settings.worker_stop_grace_ms if no Worker''s '
             'stop_grace_seconds needs it.';
  end if;

  v_pages := 0;
  loop
    v_page := ql_api.run_cancellation_converge_v1(p_page_size);
    commit;
    v_pages := v_pages + 1;
    exit when (v_page ->> 'scanned')::integer < p_page_size or (v_page ->> 'converged')::integer = 0
           or v_pages >= p_max_pages;
  end loop;

  v_pages := 0;
  loop
    v_page := ql_api.lease_expiry_reconcile_v1(p_page_size, p_grace_ms);
    commit;
    v_pages := v_pages + 1;
    exit when (v_page ->> 'scanned')::integer < p_page_size or v_pages >= p_max_pages;
  end loop;

  v_pages := 0;
  loop
    v_page := ql_api.schedule_fire_v1(p_page_size);
    commit;
    v_pages := v_pages + 1;
    exit when (v_page ->> 'scanned')::integer < p_page_size or v_pages >= p_max_pages;
  end loop;

  v_pages := 0;
  loop
    v_page := ql_api.output_expire_v1(p_page_size);
    commit;
    v_pages := v_pages + 1;
    exit when ((v_page ->> 'deleted')::integer < p_page_size and (v_page ->> 'streamsDeleted')::integer < p_page_size)
           or v_pages >= p_max_pages;
  end loop;

  begin  -- a parent still locked after 2s: the next cycle tries again
    perform ql_api.partitions_ensure_v1();
  exception when lock_not_available then
    null;
  end;
  commit;
end;
$$;

comment on procedure ql_api.converge(integer, integer, bigint) is
'Returns nothing; COMMITs after each page. Raises 22023 for bounds out of range (page size 1..128, pages 1..64, '
'grace 0..86400000 ms) and for a grace below ql_api.converge_grace_floor_v1().';
grant execute on procedure ql_api.converge(integer, integer, bigint) to ql_scheduler;

commit;
