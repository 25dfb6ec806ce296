-- Deploy qinglong:ql_api/bundle_stat_v1 to pg
-- FROZEN COPY of db/functions/ql_api/bundle_stat_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.bundle_stat_v1: whether a bundle is stored, partly uploaded or missing, so the CLI skips or resumes an upload.
-- Lock order: none (reads ql.bundles and ql.bundle_chunks).
create or replace function ql_api.bundle_stat_v1(p_digest text)
returns jsonb
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
-- stored: complete, nothing to upload. partial: an upload began; presentChunks lists the indexes already stored
-- (ascending), the others are to send with ql_api.bundle_put_v1 and the same size, then ql_api.bundle_seal_v1.
-- missing: no such bundle (sizeBytes and chunkCount NULL, presentChunks empty). Reads only: a stored bundle that no
-- revision names and that is more than a day old may still be pruned before task_create_v1 names it, which then
-- answers not_found bundle and the CLI uploads it again. Not granted to ql_runtime: the CLI calls it as a DBA.
declare
  v_bundle ql.bundles;
begin
  if p_digest is null or p_digest !~ '^[0-9a-f]{64}$' then return ql.outcome('invalid', 'digest'); end if;
  select * into v_bundle from ql.bundles b where b.digest = p_digest;
  if v_bundle.digest is null then
    return jsonb_build_object('status', 'missing', 'digest', p_digest, 'sizeBytes', null, 'chunkCount', null,
                              'presentChunks', '[]'::jsonb);
  end if;
  return jsonb_build_object(
    'status', case when v_bundle.complete then 'stored' else 'partial' end, 'digest', p_digest,
    'sizeBytes', v_bundle.size_bytes, 'chunkCount', v_bundle.chunk_count,
    'presentChunks', (select coalesce(jsonb_agg(c.idx order by c.idx), '[]'::jsonb)
                        from ql.bundle_chunks c where c.digest = p_digest));
end;
$$;

comment on function ql_api.bundle_stat_v1(text) is
'Returns stored | partial | missing {digest, sizeBytes, chunkCount, presentChunks: the stored chunk indexes, '
'ascending} (sizeBytes and chunkCount NULL when missing) | invalid (digest). Raises nothing on input.';

commit;
