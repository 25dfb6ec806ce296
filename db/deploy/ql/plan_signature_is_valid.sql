-- Deploy qinglong:ql/plan_signature_is_valid to pg
-- FROZEN COPY of db/functions/ql/plan_signature_is_valid.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql.plan_signature_is_valid: the shape of an operator's plan signature, used by a revision's CHECK and task_create_v1.
create or replace function ql.plan_signature_is_valid(p_signature jsonb)
returns boolean
language sql
immutable
strict
parallel safe
-- Exactly {"keyId": 16 lowercase hex characters, "signature": the canonical base64 of 64 bytes, an Ed25519
-- signature (88 characters, the last two "=", the one before them A, Q, g or w so that no bit is left over)}.
-- The database only stores and delivers it; the Worker verifies it against the keys it trusts.
return case when pg_catalog.jsonb_typeof(p_signature) = 'object' then
  coalesce(p_signature - 'keyId' - 'signature' = '{}'::jsonb
    and pg_catalog.jsonb_typeof(p_signature -> 'keyId') = 'string'
    and (p_signature ->> 'keyId') ~ '^[0-9a-f]{16}$'
    and pg_catalog.jsonb_typeof(p_signature -> 'signature') = 'string'
    and (p_signature ->> 'signature') ~ '^[A-Za-z0-9+/]{85}[AQgw]==$', false)
  else false end;

comment on function ql.plan_signature_is_valid(jsonb) is
'Returns true when the signature is exactly {keyId, signature} of the documented shapes, false for anything else, '
'NULL for NULL (a revision without a signature). Never raises.';

commit;
