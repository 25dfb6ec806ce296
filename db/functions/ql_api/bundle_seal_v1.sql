-- ql_api.bundle_seal_v1: complete an uploaded bundle once its chunks, in order, hash to its digest (operators).
-- Lock order: the bundle's ql.bundles row (FOR UPDATE) → its chunks (read, or deleted by cascade).
create or replace function ql_api.bundle_seal_v1(p_digest text, p_entries jsonb)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- Every chunk 0..chunk_count-1 must be stored (else not_found chunk, the first missing index as detail: the upload
-- can resume), their lengths must add up to size_bytes, and SHA-256 of their concatenation must be the digest. If
-- the bytes do not hash to the digest, the incomplete bundle and its chunks are deleted (the upload starts again)
-- and the answer is invalid digest: the one refusal that writes, and only if the caller commits. Then the bundle is
-- complete, with p_entries, and never changes again.
-- p_entries is the file list the CLI read from the archive, shown by task_revision_view_v1: an array of at most
-- 10,000 objects of exactly {path: a relative path (segments of 1..255 characters, no control character, not . or
-- .., at most 4096 in all), kind: file | dir, size: an integer 0..2^53-1, mode: an integer 0..4095 (07777)}, no path
-- twice; else invalid entries, nothing changes. The database does not open the archive: the Worker unpacks it and
-- refuses what does not agree with its own rules.
-- A complete bundle answers already_stored and writes nothing (its entries stay). Memory: the concatenation is built
-- in this backend (about twice the bundle's size while hashing). Not granted to ql_runtime: the CLI calls it as a DBA.
declare
  v_bundle ql.bundles;
  v_missing integer;
  v_total bigint;
  v_sha bytea;
begin
  if p_digest is null or p_digest !~ '^[0-9a-f]{64}$' then return ql.outcome('invalid', 'digest'); end if;
  if p_entries is null or jsonb_typeof(p_entries) <> 'array' then return ql.outcome('invalid', 'entries'); end if;
  if jsonb_array_length(p_entries) > 10000
     or not coalesce((
       select bool_and(case when jsonb_typeof(e) <> 'object' then false
                        when not coalesce(e - 'path' - 'kind' - 'size' - 'mode' = '{}'::jsonb
                                  and jsonb_typeof(e -> 'path') = 'string'
                                  and jsonb_typeof(e -> 'kind') = 'string'
                                  and jsonb_typeof(e -> 'size') = 'number' and (e ->> 'size') ~ '^[0-9]{1,16}$'
                                  and jsonb_typeof(e -> 'mode') = 'number' and (e ->> 'mode') ~ '^[0-9]{1,4}$', false)
                          then false
                        else char_length(e ->> 'path') <= 4096
                             and (e ->> 'path') ~ '^[^/]{1,255}(/[^/]{1,255})*$'
                             and (e ->> 'path') !~ '(^|/)\.{1,2}(/|$)'
                             and (e ->> 'path') !~ '[[:cntrl:]]'
                             and (e ->> 'kind') in ('file', 'dir')
                             and (e ->> 'size')::bigint <= ql.max_safe_integer()
                             and (e ->> 'mode')::integer <= 4095 end)
              and count(distinct e ->> 'path') = count(*)
         from jsonb_array_elements(p_entries) e), true) then
    return ql.outcome('invalid', 'entries');
  end if;

  select * into v_bundle from ql.bundles b where b.digest = p_digest for update;
  if v_bundle.digest is null then return ql.outcome('not_found', 'bundle'); end if;
  if v_bundle.complete then
    return jsonb_build_object('status', 'already_stored', 'digest', p_digest, 'sizeBytes', v_bundle.size_bytes,
                              'chunkCount', v_bundle.chunk_count);
  end if;
  select i into v_missing from generate_series(0, v_bundle.chunk_count - 1) i
   where not exists (select 1 from ql.bundle_chunks c where c.digest = p_digest and c.idx = i)
   order by i limit 1;
  if v_missing is not null then
    return ql.outcome('not_found', 'chunk') || jsonb_build_object('detail', v_missing);
  end if;

  select sum(octet_length(c.data)), sha256(string_agg(c.data, ''::bytea order by c.idx))
    into v_total, v_sha
    from ql.bundle_chunks c where c.digest = p_digest;
  if v_total <> v_bundle.size_bytes or encode(v_sha, 'hex') <> p_digest then
    delete from ql.bundles b where b.digest = p_digest;
    return ql.outcome('invalid', 'digest');
  end if;
  update ql.bundles b set complete = true, entries = p_entries where b.digest = p_digest;
  return jsonb_build_object('status', 'sealed', 'digest', p_digest, 'sizeBytes', v_bundle.size_bytes,
                            'chunkCount', v_bundle.chunk_count, 'entryCount', jsonb_array_length(p_entries));
end;
$$;

comment on function ql_api.bundle_seal_v1(text, jsonb) is
'Returns sealed {digest, sizeBytes, chunkCount, entryCount} | already_stored {digest, sizeBytes, chunkCount} | '
'invalid (digest: malformed, or the chunks do not hash to it, and then the upload is deleted; entries) | not_found '
'(bundle, chunk with the first missing index as detail). Raises nothing on input.';
