-- Deploy qinglong:ql_api/bundle_chunk_v1 to pg
-- FROZEN COPY of db/functions/ql_api/bundle_chunk_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.bundle_chunk_v1: one chunk of the bundle a live Attempt's plan names, for its Worker to unpack before the spawn.
-- Lock order: ql.attempt_fence's (its header states it); the revision, the bundle and the chunk are read, not locked
--   (a revision is immutable, and a bundle a revision names is complete, never changed and never pruned).
create or replace function ql_api.bundle_chunk_v1(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  p_digest text,
  p_index integer
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Only under the full fence (ql.attempt_fence), for a live Attempt (claimed, starting or running: else fenced
-- state_drift) whose Lease has not expired (else fenced lease_expired), and only for the digest the pinned
-- revision's plan names as its bundle: any other digest is not_found bundle, whether such a bundle is stored or not,
-- so a Worker learns nothing of other tasks' bundles. Chunk p_index is bytes [p_index * 262144, …) of the archive,
-- as base64 on one line; an index outside 0..chunkCount-1 is invalid index. Reads only: a call repeated after a lost
-- answer gets the same bytes. The Worker checks the SHA-256 of the whole archive against the digest.
declare
  f record;
  v_named text;
  v_bundle ql.bundles;
  v_data bytea;
begin
  if p_digest is null or p_digest !~ '^[0-9a-f]{64}$' then return ql.outcome('invalid', 'digest'); end if;
  if p_index is null or p_index < 0 then return ql.outcome('invalid', 'index'); end if;

  select * into f from ql.attempt_fence(p_worker_id, p_session_id, p_worker_generation, p_project_id,
                                        p_run_id, p_attempt_id, p_offer_id, p_lease_generation, p_token_digest);
  if f.outcome is not null then return f.outcome; end if;
  if (f.attempt).status not in ('claimed', 'starting', 'running') then return ql.outcome('fenced', 'state_drift'); end if;
  if (f.lease).expires_at_ms <= f.now_ms then return ql.outcome('fenced', 'lease_expired'); end if;

  select t.plan_json ->> 'bundle' into v_named from ql.task_execution_revisions t where t.id = (f.run).task_revision_id;
  if v_named is distinct from p_digest then return ql.outcome('not_found', 'bundle'); end if;
  select * into v_bundle from ql.bundles b where b.digest = p_digest and b.complete;
  if v_bundle.digest is null then return ql.outcome('not_found', 'bundle'); end if;
  if p_index >= v_bundle.chunk_count then return ql.outcome('invalid', 'index'); end if;
  select c.data into v_data from ql.bundle_chunks c where c.digest = p_digest and c.idx = p_index;
  if v_data is null then
    raise exception using errcode = 'QLBUG', message = 'bundle_chunk_v1: a complete bundle lacks a chunk';
  end if;

  return jsonb_build_object('status', 'chunk', 'digest', p_digest, 'index', p_index,
                            'chunkCount', v_bundle.chunk_count, 'sizeBytes', v_bundle.size_bytes,
                            'data', translate(encode(v_data, 'base64'), E'\n', ''));
end;
$$;

comment on function ql_api.bundle_chunk_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, integer) is
'Returns chunk {digest, index, chunkCount, sizeBytes, data: base64} | invalid (digest, index, the fence''s inputs) | '
'not_found (offer, bundle: not the plan''s) | fenced (ql.attempt_fence reasons, state_drift, lease_expired). Raises '
'nothing on input; QLBUG only when a complete bundle lacks a chunk.';
grant execute on function ql_api.bundle_chunk_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, integer) to ql_runtime;

commit;
