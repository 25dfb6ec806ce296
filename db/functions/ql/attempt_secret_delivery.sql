-- ql.attempt_secret_delivery: {"secrets": the sealed versions an Attempt received}, for the shell to open; {} if none.
create or replace function ql.attempt_secret_delivery(p_attempt_id uuid)
returns jsonb
language sql
stable
-- Only versions still sealed: a version destroyed since (its secret deleted) is left out, and the Worker,
-- which checks the delivery against its plan, refuses to start without it.
return (select case when pg_catalog.count(*) = 0 then '{}'::jsonb
                    else pg_catalog.jsonb_build_object('secrets', pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                 'name', s.name, 'version', v.version, 'versionId', v.id, 'kekId', v.kek_id,
                 'wrappedKey', pg_catalog.translate(pg_catalog.encode(v.wrapped_key, 'base64'), E'\n', ''),
                 'nonce', pg_catalog.encode(v.nonce, 'base64'),
                 'ciphertext', pg_catalog.translate(pg_catalog.encode(v.ciphertext, 'base64'), E'\n', ''))
               order by s.name)) end
          from ql.attempt_secrets a
          join ql.secret_versions v on v.id = a.secret_version_id
          join ql.secrets s on s.id = v.secret_id
         where a.attempt_id = p_attempt_id and v.destroyed_at_ms is null);

comment on function ql.attempt_secret_delivery(uuid) is
'Returns {"secrets": [{name, version, versionId, kekId, wrappedKey, nonce, ciphertext}]} (by name; bytes in '
'base64) of the still sealed versions the Attempt received, or {} when none. Never raises.';
