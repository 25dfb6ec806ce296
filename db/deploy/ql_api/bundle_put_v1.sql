-- Deploy qinglong:ql_api/bundle_put_v1 to pg
-- FROZEN COPY of db/functions/ql_api/bundle_put_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.bundle_put_v1: store one 256 KiB chunk of a bundle the operator's CLI uploads (operators).
-- Lock order: the bundle's ql.bundles row (FOR UPDATE; inserted by the first chunk) → its chunk.
create or replace function ql_api.bundle_put_v1(
  p_digest text,
  p_size_bytes bigint,
  p_index integer,
  p_data bytea
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- A bundle of p_size_bytes bytes is chunk_count = ceil(size / 262144) chunks: chunk p_index is bytes
-- [p_index * 262144, …) of the archive, exactly 262144 bytes except the last (the rest). The first chunk stored
-- creates the bundle, incomplete; ql_api.bundle_seal_v1 completes it. The CLI calls the chunks in one transaction,
-- or resumes an interrupted upload after ql_api.bundle_stat_v1 (chunks already there need not come again).
-- * The same bytes again at an index already stored: nothing is written, the answer is the same (stored).
-- * Other bytes at a stored index: invalid data. A size other than the stored bundle's: invalid size_bytes.
-- * A complete bundle: already_stored, nothing is written and the chunk is not looked at.
-- * A size above ql.settings.bundle_max_bytes: invalid too_large (a bundle already stored stays so if the cap is
--   lowered later). An index outside 0..chunk_count-1: invalid index; a chunk of another length: invalid data.
-- Every refusal writes nothing. Not granted to ql_runtime: the CLI calls it as a DBA.
declare
  v_bundle ql.bundles;
  v_count integer;
  v_length integer;
  v_stored bytea;
begin
  if p_digest is null or p_digest !~ '^[0-9a-f]{64}$' then return ql.outcome('invalid', 'digest'); end if;
  if p_size_bytes is null or p_size_bytes not between 1 and ql.max_safe_integer() then
    return ql.outcome('invalid', 'size_bytes');
  end if;
  if p_index is null or p_index < 0 then return ql.outcome('invalid', 'index'); end if;
  if p_data is null then return ql.outcome('invalid', 'data'); end if;

  loop
    select * into v_bundle from ql.bundles b where b.digest = p_digest for update;
    if v_bundle.digest is not null then
      if v_bundle.size_bytes <> p_size_bytes then return ql.outcome('invalid', 'size_bytes'); end if;
      if v_bundle.complete then
        return jsonb_build_object('status', 'already_stored', 'digest', p_digest, 'sizeBytes', v_bundle.size_bytes,
                                  'chunkCount', v_bundle.chunk_count);
      end if;
    end if;
    if p_size_bytes > (select st.bundle_max_bytes from ql.settings st) then return ql.outcome('invalid', 'too_large'); end if;
    v_count := ((p_size_bytes + 262143) / 262144)::integer;
    if p_index >= v_count then return ql.outcome('invalid', 'index'); end if;
    v_length := case when p_index < v_count - 1 then 262144 else (p_size_bytes - (v_count - 1)::bigint * 262144)::integer end;
    if octet_length(p_data) <> v_length then return ql.outcome('invalid', 'data'); end if;
    exit when v_bundle.digest is not null;
    -- The first chunk: the bundle row, unless a concurrent upload made it first (then it is read and locked again,
    -- above; should ql_api.prune_v1 delete that one meanwhile, this inserts it anew).
    insert into ql.bundles (digest, size_bytes, chunk_count, created_at_ms)
    values (p_digest, p_size_bytes, v_count, ql.now_ms())
    on conflict (digest) do nothing
    returning * into v_bundle;
    exit when v_bundle.digest is not null;
  end loop;

  select c.data into v_stored from ql.bundle_chunks c where c.digest = p_digest and c.idx = p_index;
  if v_stored is null then
    insert into ql.bundle_chunks (digest, idx, data) values (p_digest, p_index, p_data);
  elsif v_stored <> p_data then
    return ql.outcome('invalid', 'data');
  end if;
  return jsonb_build_object('status', 'stored', 'digest', p_digest, 'index', p_index, 'sizeBytes', v_bundle.size_bytes,
                            'chunkCount', v_bundle.chunk_count);
end;
$$;

comment on function ql_api.bundle_put_v1(text, bigint, integer, bytea) is
'Returns stored {digest, index, sizeBytes, chunkCount} (also for the same chunk again) | already_stored {digest, '
'sizeBytes, chunkCount} (the bundle is complete; nothing written) | invalid (digest, size_bytes, index, data, '
'too_large). Raises nothing on input.';

commit;
