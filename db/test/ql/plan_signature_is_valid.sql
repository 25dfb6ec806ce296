-- ql.plan_signature_is_valid: the exact shape of an operator's plan signature, {keyId, signature} (an Ed25519
-- signature in canonical base64), which a task revision's CHECK and ql_api.task_create_v1 apply.
begin;
\ir ../fixtures.psql
select plan(12);

select '0123456789abcdef' as kid, repeat('A', 85) || 'Q==' as sig \gset
select ok(ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid', 'signature', :'sig')), 'keyId and signature');
select ok(ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid', 'signature', repeat('+/', 42) || 'zw==')),
          'base64 uses + and / (the standard alphabet)');
select is(ql.plan_signature_is_valid(null), null::boolean, 'NULL (no signature) is NULL: the CHECK lets it pass');
select ok(not ql.plan_signature_is_valid('null'), 'a JSON null is not a signature');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid')), 'the signature is required');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('signature', :'sig')), 'the key id is required');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid', 'signature', :'sig', 'alg', 'ed25519')),
          'no other key');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('keyId', upper(:'kid'), 'signature', :'sig')),
          'the key id is lowercase hex');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid' || '0', 'signature', :'sig')),
          'the key id is 16 characters');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid', 'signature', replace(:'sig', 'Q==', 'R=='))),
          'canonical base64 only: no bit left over after 64 bytes');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid', 'signature', repeat('A', 86) || '=')),
          'exactly 64 bytes: 88 characters ending in ==');
select ok(not ql.plan_signature_is_valid(jsonb_build_object('keyId', :'kid', 'signature', replace(:'sig', 'A', '-'))),
          'not base64url');

select * from finish();
rollback;
