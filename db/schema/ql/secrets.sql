-- Project secrets (docs/decisions/0015-secrets.md): a name per Project, each `set` an immutable version sealed by
-- the shell (AES-256-GCM under a fresh data key, the data key wrapped by a key-encryption key PostgreSQL never
-- holds). Rows hold ciphertext, nonces, wrapped keys and key ids, never a value. ql.attempt_secrets records the
-- versions each Attempt received (its starting ACK chose them). A deleted secret, and every version no live
-- Attempt holds once a newer one exists, keeps its row (the history of who received what) and loses its sealed
-- bytes (destroyed_at_ms). The outcome reasons the secret functions return are appended to the catalogue.
begin;
set local role ql_owner;

create domain ql.secret_name as text check (value ~ '^[A-Z_][A-Z0-9_]{0,63}$');
comment on domain ql.secret_name is 'An environment-variable name: [A-Z_][A-Z0-9_]{0,63}.';

create table ql.secrets (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  project_id uuid not null references ql.projects (id),
  name ql.secret_name not null,
  current_version integer not null default 0 check (current_version >= 0),
  created_at_ms ql.ms not null,
  updated_at_ms ql.ms not null,
  unique (project_id, name)
);
comment on table ql.secrets is 'A Project''s named secret. current_version 0: deleted (or never set); a later set revives it.';
comment on column ql.secrets.current_version is 'The version a starting ACK delivers; 0 when deleted.';

create table ql.secret_versions (
  id uuid primary key,
  secret_id uuid not null references ql.secrets (id),
  version integer not null check (version >= 1),
  size integer not null check (size between 1 and 65536),
  kek_id text check (kek_id ~ '^[A-Za-z0-9_-]{12}$'),
  wrapped_key bytea check (pg_catalog.octet_length(wrapped_key) = 60),
  nonce bytea check (pg_catalog.octet_length(nonce) = 12),
  ciphertext bytea check (pg_catalog.octet_length(ciphertext) = size + 16),
  created_by uuid not null references ql.subjects (id),
  created_at_ms ql.ms not null,
  destroyed_at_ms ql.ms,
  unique (secret_id, version),
  check ((destroyed_at_ms is null and kek_id is not null and wrapped_key is not null and nonce is not null
          and ciphertext is not null)
      or (destroyed_at_ms is not null and kek_id is null and wrapped_key is null and nonce is null
          and ciphertext is null))
);
comment on table ql.secret_versions is
'One sealed version of a secret. id is chosen by the shell and bound, with the Project and the name, in the '
'associated data of both ciphertexts (a row moved to another secret or version does not open). Destroyed: '
'the sealed columns are NULL and destroyed_at_ms says when.';
comment on column ql.secret_versions.wrapped_key is 'The data key: 12-byte nonce || AES-256-GCM ciphertext and tag, under the KEK kek_id.';
comment on column ql.secret_versions.ciphertext is 'The value under the data key: AES-256-GCM ciphertext and 16-byte tag (size + 16 bytes).';

create table ql.attempt_secrets (
  attempt_id uuid not null references ql.run_attempts (id),
  secret_version_id uuid not null references ql.secret_versions (id),
  primary key (attempt_id, secret_version_id)
);
create index attempt_secrets_version_idx on ql.attempt_secrets (secret_version_id);
comment on table ql.attempt_secrets is
'The secret versions an Attempt received at its starting ACK (names and versions through ql.secret_versions; '
'never a value). Replays of that ACK deliver exactly these.';

alter type ql.invalid_reason add value if not exists 'version_id';
alter type ql.invalid_reason add value if not exists 'sealed';
alter type ql.not_found_reason add value if not exists 'secret';

commit;
