-- ql_api.retain: one retention cycle: partitions ahead, old partitions dropped, then pages of ql_api.prune_v1.
create or replace procedure ql_api.retain(p_page_size integer default 256, p_budget_ms integer default 40000)
language plpgsql
as $$
-- Each step is its own short transaction (COMMIT after each): ql_api.partitions_ensure_v1 (a parent still locked
-- after 2s is left to the next minute's convergence), ql_api.retention_maintain_v1 until it drops nothing (one
-- partition per transaction), then pages of ql_api.prune_v1 until one is short of every kind (Runs, sessions,
-- mutations, bundles, fire times) or the time budget is spent, and last ql_api.retention_cycle_v1 records the cycle.
-- A page is bounded by its size, takes no lock it must wait for (FOR UPDATE SKIP LOCKED) and commits alone; the
-- budget bounds the CALL: no page starts after p_budget_ms, so the role's statement_timeout (60s for ql_scheduler,
-- which times the whole CALL as one statement) only ever stops a cycle gone wrong. pg_cron runs it every five minutes
-- (ql/retention_schedule), so a backlog is worked off at up to 40 s in every 300 (decision 0018).
-- As ql_api.converge, it is not SECURITY DEFINER (COMMIT): it runs as its caller, qualifies every name, and only
-- calls SECURITY DEFINER functions. Call it outside an explicit transaction block.
-- Bounds: p_page_size 1..1024, p_budget_ms 1..3600000. Raises 22023 for out-of-range bounds.
declare
  v_started timestamptz := pg_catalog.clock_timestamp();
  v_step jsonb;
  v_pages integer := 0;
  v_runs bigint := 0;
  v_finished boolean := false;
begin
  if p_page_size is null or p_page_size not between 1 and 1024 or p_budget_ms is null or p_budget_ms not between 1 and 3600000 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.retain: bounds out of range (page_size %s, budget_ms %s)', p_page_size, p_budget_ms);
  end if;
  begin
    perform ql_api.partitions_ensure_v1();
  exception when lock_not_available then
    null;
  end;
  commit;
  loop
    v_step := ql_api.retention_maintain_v1();
    commit;
    exit when v_step ->> 'dropped' is null
           or pg_catalog.clock_timestamp() >= v_started + pg_catalog.make_interval(secs => p_budget_ms / 1000.0);
  end loop;
  loop
    exit when pg_catalog.clock_timestamp() >= v_started + pg_catalog.make_interval(secs => p_budget_ms / 1000.0);
    v_step := ql_api.prune_v1(p_page_size);
    commit;
    v_pages := v_pages + 1;
    v_runs := v_runs + (v_step ->> 'runs')::integer;
    v_finished := (v_step ->> 'runs')::integer < p_page_size and (v_step ->> 'sessions')::integer < p_page_size
              and (v_step ->> 'mutations')::integer < p_page_size and (v_step ->> 'bundles')::integer < p_page_size
              and (v_step ->> 'fires')::integer < p_page_size;
    exit when v_finished;
  end loop;
  perform ql_api.retention_cycle_v1((extract(epoch from v_started) * 1000)::bigint, v_pages, v_runs, v_finished);
  commit;
end;
$$;

comment on procedure ql_api.retain(integer, integer) is
'Returns nothing; COMMITs after each step and page. Raises 22023 for bounds out of range (page size 1..1024, '
'budget 1..3600000 ms).';
grant execute on procedure ql_api.retain(integer, integer) to ql_scheduler;
