-- Deploy qinglong:ql_api/task_revision_view_v1 to pg
-- FROZEN COPY of db/functions/ql_api/task_revision_view_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.task_revision_view_v1: one task revision in full: its plan, its signature and its bundle's file list (operators).
-- Lock order: none (reads a revision, which is immutable, and the bundle it names).
create or replace function ql_api.task_revision_view_v1(p_revision_id uuid)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- For `qinglong task show` (the revision id is task_list_v1's revisionId) or any Run's pinned revision. plan is the
-- whole plan as stored (env values included: an operator's view); planSignature is {keyId, signature} or NULL
-- (unsigned); bundle is NULL when the plan names none, else {digest, sizeBytes, chunkCount, entries} (the file list
-- the CLI sent when it sealed the upload). Not task_list_v1: that one is also the user API's task list, whose
-- contract and 2 MiB cap have no room for file lists. Not granted to ql_runtime: the CLI calls it as a DBA.
declare
  v_revision ql.task_execution_revisions;
begin
  if p_revision_id is null then return ql.outcome('invalid', 'revision_id'); end if;
  select * into v_revision from ql.task_execution_revisions r where r.id = p_revision_id;
  if v_revision.id is null then return ql.outcome('not_found', 'revision'); end if;
  return jsonb_build_object(
    'status', 'found', 'revisionId', v_revision.id, 'taskId', v_revision.task_id, 'projectId', v_revision.project_id,
    'createdAtMs', v_revision.created_at_ms, 'plan', v_revision.plan_json, 'planSignature', v_revision.plan_signature,
    'bundle', (select jsonb_build_object('digest', b.digest, 'sizeBytes', b.size_bytes, 'chunkCount', b.chunk_count,
                                         'entries', b.entries)
                 from ql.bundles b where b.digest = v_revision.plan_json ->> 'bundle'));
end;
$$;

comment on function ql_api.task_revision_view_v1(uuid) is
'Returns found {revisionId, taskId, projectId, createdAtMs, plan, planSignature (NULL: unsigned), bundle (NULL: '
'none; else digest, sizeBytes, chunkCount, entries)} | invalid (revision_id) | not_found (revision). Raises nothing '
'on input.';

commit;
