-- Deploy qinglong:ql_api/notify_claim_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_claim_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_claim_v1: claim a page of due notifications for one dispatcher (ql_notify), each with its rule and its sealed secret.
-- Lock order: outbox rows (FOR UPDATE SKIP LOCKED), oldest due first; then reads of rules, Projects, tasks, secrets.
create or replace function ql_api.notify_claim_v1(p_limit integer, p_lease_ms bigint)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Due: pending and next_attempt_at_ms <= database time (ql.notify_outbox_due_idx). A row another dispatcher holds
-- is skipped, never waited for, so dispatchers never deliver the same claim twice at once. A claim counts an
-- attempt and moves next_attempt_at_ms p_lease_ms ahead: a dispatcher killed before it reports leaves the row to
-- be claimed again after the lease (at least once; the receiver dedupes by the id). A due row whose attempts are
-- already spent (its last claim never reported) ends dead first. Each item carries what a delivery needs: the
-- rule's channel, URL and template, the Project's and task's names, the event payload and the CURRENT version of
-- the rule's secret still sealed (the dispatcher opens it with the shell's key-encryption keys; PostgreSQL never
-- holds a key), or no secret when it is deleted.
declare
  v_now bigint;
  v_max integer;
  v_items jsonb;
begin
  if p_limit is null or p_limit not between 1 and 100 then return ql.outcome('invalid', 'limit'); end if;
  if p_lease_ms is null or p_lease_ms not between 1000 and 3600000 then return ql.outcome('invalid', 'lease_ms'); end if;
  v_now := ql.now_ms();
  select st.notify_max_attempts into v_max from ql.settings st;

  update ql.notify_outbox o set state = 'dead', ended_at_ms = v_now
   where o.id in (select x.id from ql.notify_outbox x
                   where x.state = 'pending' and x.next_attempt_at_ms <= v_now and x.attempts >= v_max
                   order by x.next_attempt_at_ms limit p_limit for update skip locked);

  with due as (
    select x.id from ql.notify_outbox x
     where x.state = 'pending' and x.next_attempt_at_ms <= v_now
     order by x.next_attempt_at_ms, x.id
     limit p_limit
       for update skip locked),
  claimed as (
    update ql.notify_outbox o set attempts = o.attempts + 1, next_attempt_at_ms = v_now + p_lease_ms
      from due where o.id = due.id
    returning o.*)
  select coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
           'id', c.id, 'attemptNo', c.attempts, 'kind', c.kind, 'createdAtMs', c.created_at_ms,
           'projectId', c.project_id, 'project', p.name, 'task', t.name, 'rule', r.name, 'channel', r.channel,
           'url', r.url, 'template', r.template, 'payload', c.payload,
           'secret', case when v.id is not null then jsonb_build_object(
                    'name', s.name, 'version', v.version, 'versionId', v.id, 'kekId', v.kek_id,
                    'wrappedKey', translate(encode(v.wrapped_key, 'base64'), E'\n', ''),
                    'nonce', encode(v.nonce, 'base64'),
                    'ciphertext', translate(encode(v.ciphertext, 'base64'), E'\n', '')) end))
           order by c.next_attempt_at_ms, c.id), '[]'::jsonb)
    into v_items
    from claimed c
    join ql.notify_rules r on r.id = c.rule_id
    join ql.projects p on p.id = c.project_id
    left join ql.tasks t on t.id = (c.payload ->> 'taskId')::uuid
    left join ql.secrets s on s.project_id = c.project_id and s.name = r.secret_name and s.current_version > 0
    left join ql.secret_versions v on v.secret_id = s.id and v.version = s.current_version
                                  and v.destroyed_at_ms is null;
  return jsonb_build_object('status', 'claimed', 'nowMs', v_now, 'items', v_items);
end;
$$;

comment on function ql_api.notify_claim_v1(integer, bigint) is
'Returns claimed {nowMs, items: [{id, attemptNo, kind, createdAtMs, projectId, project, task?, rule, channel, url?, '
'template?, payload, secret?: {name, version, versionId, kekId, wrappedKey, nonce, ciphertext}}]} | invalid '
'(limit, lease_ms). Raises nothing on input.';
grant execute on function ql_api.notify_claim_v1(integer, bigint) to ql_notify;

commit;
