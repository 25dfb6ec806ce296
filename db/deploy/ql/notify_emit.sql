-- Deploy qinglong:ql/notify_emit to pg
-- FROZEN COPY of db/functions/ql/notify_emit.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.notify_emit: write one outbox row per live rule of a Project that notifies an event kind, in the caller's transaction.
create or replace function ql.notify_emit(p_project_id uuid, p_kind text, p_payload jsonb, p_at_ms bigint)
returns integer
language sql
volatile
-- The one probe: the Project's live rules (ql.notify_rules_project_name_idx, a partial index of a table that holds
-- a few rows per Project); a Project without a rule for the kind writes nothing. The outbox row is due at once and
-- its id is the idempotency key every delivery of it carries. Lock order: none taken (an INSERT of new rows).
begin atomic
  with written as (
    insert into ql.notify_outbox (rule_id, project_id, kind, payload, created_at_ms, next_attempt_at_ms)
    select nr.id, p_project_id, p_kind, p_payload, p_at_ms, p_at_ms
      from ql.notify_rules nr
     where nr.project_id = p_project_id and nr.removed_at_ms is null and p_kind = any (nr.events)
    returning 1)
  select pg_catalog.count(*)::integer from written;
end;

comment on function ql.notify_emit(uuid, text, jsonb, bigint) is
'Returns how many outbox rows it wrote (0 when no live rule of the Project names the kind). Never raises on input.';

commit;
