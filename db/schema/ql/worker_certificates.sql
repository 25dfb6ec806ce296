-- A Worker's certificate is renewed without a new generation (docs/decisions/0012-credential-rotation.md):
-- ql_api.worker_certificate_renew_v1 makes the new certificate current and keeps the one before it in
-- previous_cert_fingerprint, so a session still opens with either while the new files travel to the Worker
-- (TLS refuses either once it has expired). Re-enrolment clears it. cert_not_after_ms is the current
-- certificate's expiry, recorded by the command that issued it (`qinglong worker enroll`, `worker renew`),
-- null for a Worker enrolled before this change until its next renewal; `qinglong worker list` and the
-- shell's /metrics show it. invalid reason not_after: an expiry that is not ahead of database time.
-- Both columns are nullable without a default: adding them rewrites nothing.
begin;
set local role ql_owner;

alter table ql.workers
  add column cert_not_after_ms ql.ms,
  add column previous_cert_fingerprint ql.sha256;
comment on column ql.workers.cert_not_after_ms is
  'When the current certificate (cert_fingerprint) expires, as its issuer recorded it; null: not recorded.';
comment on column ql.workers.previous_cert_fingerprint is
  'The certificate the last renewal replaced: a session still opens with it. Cleared at re-enrolment.';

alter type ql.invalid_reason add value if not exists 'not_after';

commit;
