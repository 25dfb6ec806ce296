-- Bundles (scripts travel with their task): an archive of scripts named by its SHA-256, which the operator's CLI
-- uploads once in 256 KiB chunks (ql_api.bundle_put_v1; ql_api.bundle_seal_v1 marks it complete once the chunks,
-- in order, hash to its name) and which a plan names (`bundle`), so that the Worker whose Attempt runs that plan
-- fetches it (ql_api.bundle_chunk_v1) and unpacks it before the spawn. ql.settings gains bundle_max_bytes.
-- A task revision gains plan_signature: an operator's Ed25519 signature of the plan, which the database stores and
-- delivers with the offer and the Worker verifies. Retention (ql_api.prune_v1): a bundle no revision names leaves a
-- day after its upload began (an upload never sealed too); task_execution_revisions_bundle_idx answers "does a
-- revision name it" without reading every revision. The outcome reasons of the bundle functions, the signature
-- and the revision view are appended to the catalogue.
begin;
set local role ql_owner;

alter table ql.settings
  add column bundle_max_bytes bigint not null default 33554432 check (bundle_max_bytes between 1048576 and 536870912);
comment on column ql.settings.bundle_max_bytes is
'Largest bundle an upload may declare (ql_api.bundle_put_v1), 1 MiB to 512 MiB (sealing hashes it in one value). Lowering it keeps stored bundles.';

create table ql.bundles (
  digest text primary key check (digest ~ '^[0-9a-f]{64}$'),
  size_bytes bigint not null check (size_bytes between 1 and 536870912),
  chunk_count integer not null,
  entries jsonb,
  complete boolean not null default false,
  created_at_ms ql.ms not null default ql.now_ms(),
  check (chunk_count = (size_bytes + 262143) / 262144),
  check (entries is null or pg_catalog.jsonb_typeof(entries) = 'array'),
  check (complete = (entries is not null))
);
comment on table ql.bundles is
'An archive of scripts, named by the SHA-256 of its bytes (64 lowercase hex). Incomplete while its chunks arrive; '
'complete (sealed) once they hash to the digest, and never changed after. Deleted a day after created_at_ms when no '
'task revision names it (ql_api.prune_v1).';
comment on column ql.bundles.chunk_count is 'ceil(size_bytes / 262144): every chunk is 256 KiB but the last.';
comment on column ql.bundles.entries is
'The file list the CLI sent when sealing: [{path, kind: file | dir, size, mode}], at most 10,000. NULL until sealed.';
comment on column ql.bundles.created_at_ms is 'Database time of the first chunk stored (the upload''s start).';

create table ql.bundle_chunks (
  digest text not null references ql.bundles (digest) on delete cascade,
  idx integer not null check (idx between 0 and 4095),
  data bytea not null check (pg_catalog.octet_length(data) between 1 and 262144),
  primary key (digest, idx)
);
comment on table ql.bundle_chunks is
'The bytes of a bundle: chunk idx is bytes [idx * 262144, (idx + 1) * 262144) of the archive.';

alter table ql.task_execution_revisions
  add column plan_signature jsonb check (plan_signature is null or ql.plan_signature_is_valid(plan_signature));
comment on column ql.task_execution_revisions.plan_signature is
'An operator''s signature of plan_json, {keyId, signature} (ql.plan_signature_is_valid), or NULL: unsigned. '
'Stored and delivered with each offer (planSignature); the Worker verifies it.';
create index task_execution_revisions_bundle_idx on ql.task_execution_revisions ((plan_json ->> 'bundle'))
  where plan_json ? 'bundle';
comment on index ql.task_execution_revisions_bundle_idx is
'ql_api.prune_v1: does a revision name this bundle (queries say plan_json ? ''bundle'' to use it)';

alter type ql.invalid_reason add value if not exists 'digest';
alter type ql.invalid_reason add value if not exists 'size_bytes';
alter type ql.invalid_reason add value if not exists 'index';
alter type ql.invalid_reason add value if not exists 'data';
alter type ql.invalid_reason add value if not exists 'entries';
alter type ql.invalid_reason add value if not exists 'plan_signature';
alter type ql.invalid_reason add value if not exists 'revision_id';
alter type ql.not_found_reason add value if not exists 'bundle';
alter type ql.not_found_reason add value if not exists 'chunk';
alter type ql.not_found_reason add value if not exists 'revision';

commit;
