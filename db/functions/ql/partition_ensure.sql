-- ql.partition_ensure: create the missing monthly partitions of a table partitioned by a ms column.
create or replace function ql.partition_ensure(p_table regclass, p_from_ms bigint, p_months_ahead integer)
returns integer
language plpgsql
volatile
as $$
-- From the month holding p_from_ms through p_months_ahead months after it.
-- A partition is named <table>_pYYYYMM. Each missing one is created as a plain table LIKE its parent and then
-- ATTACHed, which takes only SHARE UPDATE EXCLUSIVE on the parent: live inserts of the parent go on meanwhile.
-- Row triggers and indexes of the parent are cloned onto it by the attach; a statement trigger is not, so each
-- partition gets its own BEFORE TRUNCATE ql.reject_mutation (<partition>_no_truncate): a TRUNCATE of the
-- partition is refused as one of its parent is. Existing partitions are left alone.
-- Creators of one table are serialized by an advisory lock on it (the minutely convergence and the retention cycle
-- both call it): the second finds what the first created.
-- Runs as its caller (ql_owner: the deploy script or ql_api.partitions_ensure_v1).
declare
  v_month timestamp;
  v_name text;
  v_lo bigint;
  v_hi bigint;
  v_created integer := 0;
begin
  if p_months_ahead is null or p_months_ahead not between 0 and 24 then
    raise exception using errcode = '22023',
      message = pg_catalog.format('ql.partition_ensure: months ahead %s outside 0..24', p_months_ahead);
  end if;
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('ql.partition_ensure:' || p_table::text, 0));
  v_month := pg_catalog.date_trunc('month', pg_catalog.to_timestamp(p_from_ms / 1000.0) at time zone 'UTC');
  for i in 0 .. p_months_ahead loop
    v_name := (select c.relname from pg_catalog.pg_class c where c.oid = p_table)
              || '_p' || pg_catalog.to_char(v_month, 'YYYYMM');
    v_lo := (extract(epoch from v_month at time zone 'UTC') * 1000)::bigint;
    v_hi := (extract(epoch from (v_month + interval '1 month') at time zone 'UTC') * 1000)::bigint;
    if pg_catalog.to_regclass('ql.' || v_name) is null then
      execute pg_catalog.format('create table ql.%I (like %s including defaults including constraints)', v_name, p_table);
      execute pg_catalog.format('alter table %s attach partition ql.%I for values from (%s) to (%s)',
                                p_table, v_name, v_lo, v_hi);
      execute pg_catalog.format('create trigger %I before truncate on ql.%I for each statement '
                                'execute function ql.reject_mutation()', v_name || '_no_truncate', v_name);
      v_created := v_created + 1;
    end if;
    v_month := v_month + interval '1 month';
  end loop;
  return v_created;
end;
$$;

comment on function ql.partition_ensure(regclass, bigint, integer) is
'Returns how many partitions <table>_pYYYYMM it created. Raises 22023 for p_months_ahead outside 0..24.';
