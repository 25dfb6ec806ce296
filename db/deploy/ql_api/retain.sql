-- Deploy qinglong:ql_api/retain to pg
-- FROZEN COPY of db/functions/ql_api/retain.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.retain: one daily retention cycle: the partition step, then pages of ql_api.prune_v1.
create or replace procedure ql_api.retain(p_page_size integer default 256, p_max_pages integer default 64)
language plpgsql
as $$
-- Each page is its own short transaction (COMMIT between pages), stopping on a page short of every kind (Runs,
-- sessions, mutations, bundles).
-- pg_cron runs it as ql_scheduler (job qinglong-retention, ql/retention_schedule); an operator may CALL it by hand.
-- Not SECURITY DEFINER, for the same reason as ql_api.converge (COMMIT): it runs as its caller, qualifies every
-- name, and only calls the two SECURITY DEFINER functions. Call it outside an explicit transaction block.
-- Partitions whose Runs this cycle pruned are dropped by the next cycle's partition step.
-- Bounds: p_page_size 1..1024, p_max_pages 1..256. Raises 22023 for out-of-range bounds.
declare
  v_page jsonb;
  v_pages integer := 0;
begin
  if p_page_size is null or p_page_size not between 1 and 1024 or p_max_pages is null or p_max_pages not between 1 and 256 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.retain: bounds out of range (page_size %s, max_pages %s)', p_page_size, p_max_pages);
  end if;
  perform ql_api.retention_maintain_v1(2);
  commit;
  loop
    v_page := ql_api.prune_v1(p_page_size);
    commit;
    v_pages := v_pages + 1;
    exit when ((v_page ->> 'runs')::integer < p_page_size and (v_page ->> 'sessions')::integer < p_page_size
               and (v_page ->> 'mutations')::integer < p_page_size and (v_page ->> 'bundles')::integer < p_page_size)
           or v_pages >= p_max_pages;
  end loop;
end;
$$;

comment on procedure ql_api.retain(integer, integer) is
'Returns nothing; COMMITs between pages. Raises 22023 for bounds out of range (page size 1..1024, pages '
'1..256).';
grant execute on procedure ql_api.retain(integer, integer) to ql_scheduler;

commit;
