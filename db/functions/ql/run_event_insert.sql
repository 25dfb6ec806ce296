-- ql.run_event_insert: write one event of a Run at the sequence its caller's one UPDATE of the Run already took.
create or replace function ql.run_event_insert(
  p_run_id uuid,
  p_sequence bigint,            -- the Run's event_sequence the caller's UPDATE took for this event
  p_run_created_at_ms bigint,   -- the Run's created_at_ms (that UPDATE returns it): bounds the duplicate check
  p_type text,
  p_actor_kind ql.actor_kind,
  p_actor_id uuid,
  p_attempt_id uuid,
  p_payload jsonb,
  p_at_ms bigint,
  p_dedupe_key text,
  p_event_id uuid default null  -- NULL: a fresh server id; convergence passes a stable one
)
returns void
language plpgsql
volatile
as $$
-- The ONLY writer of ql.run_events. Its callers bump runs.version and runs.event_sequence together in the
-- UPDATE that also makes their own change of the Run (ql.run_event for a lone event; ql.attempt_end, the pull and
-- ql.run_requeue for a move and its events), so a Run is written once per call and sequences stay contiguous.
-- Event ids and dedupe keys are unique: ql.run_events is partitioned by time, so no unique index spans it;
-- every dedupe key names its Run or one of its Attempts and every stable event id hashes its Run
-- (ql.stable_event_id), so a duplicate can only be an event of the same Run. Those are written one at a time
-- under the Run's row lock (the caller's UPDATE), and the next statement sees every committed one: the INSERT
-- writes nothing when the Run's events (its primary key prefix) hold the id or the key, and then the lookup
-- raises unique_violation naming the unique key it stands for.
-- The lookup reads only the partitions that can hold the Run's events: from a day before the Run was created to a
-- day after this event (ql.run_events is partitioned by occurred_at_ms, and every event is stamped with database
-- time, after the Run's creation). A plan pruned to one or two partitions costs the same however many months exist
-- ahead or behind; the day each side covers a database clock stepped back by less than a day.
declare
  v_event_id uuid := coalesce(p_event_id, pg_catalog.gen_random_uuid());
  v_dup_id boolean;
begin
  insert into ql.run_events (run_id, sequence, event_id, dedupe_key, type, actor_kind, actor_id,
                             attempt_id, payload, occurred_at_ms)
  select p_run_id, p_sequence, v_event_id, p_dedupe_key, p_type,
         p_actor_kind, p_actor_id, p_attempt_id, coalesce(p_payload, '{}'), p_at_ms
   where not exists (select from ql.run_events e
                      where e.run_id = p_run_id and (e.event_id = v_event_id or e.dedupe_key = p_dedupe_key)
                        and e.occurred_at_ms >= p_run_created_at_ms - 86400000 and e.occurred_at_ms <= p_at_ms + 86400000);
  if not found then
    select pg_catalog.bool_or(e.event_id = v_event_id) into v_dup_id
      from ql.run_events e
     where e.run_id = p_run_id and (e.event_id = v_event_id or e.dedupe_key = p_dedupe_key)
       and e.occurred_at_ms >= p_run_created_at_ms - 86400000 and e.occurred_at_ms <= p_at_ms + 86400000;
    raise exception using errcode = 'unique_violation',
      constraint = case when v_dup_id then 'run_events_event_id_key' else 'run_events_dedupe_key_key' end,
      message = pg_catalog.format('duplicate key value violates unique constraint "%s"',
                                  case when v_dup_id then 'run_events_event_id_key' else 'run_events_dedupe_key_key' end);
  end if;
end;
$$;

comment on function ql.run_event_insert(uuid, bigint, bigint, text, ql.actor_kind, uuid, uuid, jsonb, bigint, text, uuid) is
'Returns nothing. Raises unique_violation on a duplicate event id or dedupe key of the Run '
'(run_events_event_id_key, run_events_dedupe_key_key).';
