-- Revert qinglong:ql_api/converge from pg
-- RESTORES the previous instance: the body of deploy/ql_api/converge@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on procedure ql_api.converge(integer, integer, bigint) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql_api.converge: one convergence cycle — pages of cancellation convergence, then pages of lease-expiry
-- recovery, each page its own short transaction (COMMIT between pages), stopping early on a short page
-- (or, for convergence, a page that converged nothing: only blocked Runs are left).
-- pg_cron runs it as ql_scheduler (`CALL ql_api.converge()`); an operator may CALL it once by hand.
-- The one routine that is NOT SECURITY DEFINER: PostgreSQL refuses COMMIT inside a SECURITY DEFINER
-- procedure or one with a SET clause ("invalid transaction termination"), so it runs as its caller,
-- qualifies every name, and only calls the two SECURITY DEFINER page functions. Call it outside an
-- explicit transaction block (CALL in autocommit mode), or the COMMITs fail.
-- Bounds: p_page_size 1..128, p_max_pages 1..64, p_grace_ms 0..86400000. Never a per-Run timer.
-- Raises 22023 (invalid_parameter_value) for out-of-range bounds.
-- signature: ql_api.converge(integer, integer, bigint)
-- grant execute: ql_scheduler
create or replace procedure ql_api.converge(
  p_page_size integer default 64,
  p_max_pages integer default 16,
  p_grace_ms bigint default 30000
)
language plpgsql
as $$
declare
  v_page jsonb;
  v_pages integer;
begin
  if p_page_size is null or p_page_size not between 1 and 128
     or p_max_pages is null or p_max_pages not between 1 and 64
     or p_grace_ms is null or p_grace_ms not between 0 and 86400000 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql_api.converge: bounds out of range (page_size %s, max_pages %s, grace_ms %s)',
                                  p_page_size, p_max_pages, p_grace_ms);
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
end;
$$;

comment on procedure ql_api.converge(integer, integer, bigint) is
'One convergence cycle: pages of run_cancellation_converge_v1 then of lease_expiry_reconcile_v1, COMMIT after each, '
'early stop on a short page. SECURITY INVOKER by necessity (COMMIT). Raises 22023 on out-of-range bounds.';
revoke all on procedure ql_api.converge(integer, integer, bigint) from public;
grant execute on procedure ql_api.converge(integer, integer, bigint) to ql_scheduler;

commit;
