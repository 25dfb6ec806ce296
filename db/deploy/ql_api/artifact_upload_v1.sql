-- Deploy qinglong:ql_api/artifact_upload_v1 to pg
-- FROZEN COPY of db/functions/ql_api/artifact_upload_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.artifact_upload_v1: store one artifact (log or result) of a live Attempt and return its receipt.
-- Lock order: ql.attempt_fence's (its header states it).
create or replace function ql_api.artifact_upload_v1(
  p_worker_id uuid,
  p_session_id uuid,
  p_worker_generation bigint,
  p_project_id uuid,
  p_run_id uuid,
  p_attempt_id uuid,
  p_offer_id uuid,
  p_lease_generation bigint,
  p_token_digest bytea,
  p_kind text,
  p_sha256 bytea,
  p_size integer,
  p_content bytea
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Content is capped by ql.settings.artifact_max_bytes and must hash to the declared SHA-256.
-- One artifact per kind per Attempt: an exact replay returns the same receipt (also after the
-- Attempt ended); a different content for the same kind is fenced.
declare
  f record;
  v_artifact ql.artifacts;
begin
  if p_kind is null or p_kind not in ('log', 'result') then return ql.outcome('invalid', 'kind'); end if;
  if p_sha256 is null or octet_length(p_sha256) <> 32 then return ql.outcome('invalid', 'sha256'); end if;
  if p_size is null or p_content is null or p_size <> octet_length(p_content) then
    return ql.outcome('invalid', 'size');
  end if;
  if p_size > (select st.artifact_max_bytes from ql.settings st) then
    return ql.outcome('invalid', 'too_large');
  end if;
  if sha256(p_content) <> p_sha256 then return ql.outcome('invalid', 'sha256_mismatch'); end if;

  select * into f from ql.attempt_fence(p_worker_id, p_session_id, p_worker_generation, p_project_id,
                                        p_run_id, p_attempt_id, p_offer_id, p_lease_generation, p_token_digest);
  if f.outcome is not null then return f.outcome; end if;

  select * into v_artifact from ql.artifacts a where a.attempt_id = p_attempt_id and a.kind = p_kind;
  if v_artifact.id is not null and (v_artifact.sha256 <> p_sha256 or v_artifact.size <> p_size) then
    return ql.outcome('fenced', 'artifact_conflict');
  end if;
  if v_artifact.id is null then
    if (f.attempt).status not in ('starting', 'running') then
      return ql.outcome('fenced', 'state_drift');
    end if;
    if (f.lease).expires_at_ms <= f.now_ms then return ql.outcome('fenced', 'lease_expired'); end if;
    insert into ql.artifacts (attempt_id, kind, sha256, size, content, created_at_ms)
    values (p_attempt_id, p_kind, p_sha256, p_size, p_content, f.now_ms)
    returning * into v_artifact;
  end if;

  return jsonb_build_object('status', 'stored', 'receipt', jsonb_build_object(
    'artifactId', v_artifact.id, 'kind', v_artifact.kind,
    'sha256', encode(v_artifact.sha256, 'hex'), 'size', v_artifact.size));
end;
$$;

comment on function ql_api.artifact_upload_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bytea, integer, bytea) is
'Returns stored {receipt: artifactId, kind, sha256, size} | invalid (kind, sha256, size, too_large, '
'sha256_mismatch, the fence''s inputs) | not_found | fenced (ql.attempt_fence reasons, artifact_conflict, '
'state_drift, lease_expired). Raises nothing on input.';
grant execute on function ql_api.artifact_upload_v1(uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, bytea, integer, bytea) to ql_runtime;

commit;
