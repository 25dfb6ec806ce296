-- Tests ql.name_is_uuid: every spelling PostgreSQL's uuid input or Python's uuid.UUID reads is a uuid (so a creator
-- refuses it as a name), names that merely hold hex digits are not.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(6);

select volatility_is('ql', 'name_is_uuid', array['text'], 'immutable', 'immutable: a pure test of its argument');
select is(array(select n from unnest(array[
                  '0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b',          -- canonical
                  '0B5E6F2A-9C1D-4E3F-8A7B-6C5D4E3F2A1B',          -- in capitals (the lookups match either case)
                  '0b5e6f2a9c1d4e3f8a7b6c5d4e3f2a1b',              -- without hyphens (PostgreSQL and Python read it)
                  '0b5e-6f2a-9c1d-4e3f-8a7b-6c5d-4e3f-2a1b',       -- a hyphen after every four digits (PostgreSQL)
                  '{0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b}',        -- in braces
                  'urn:uuid:0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b', -- a URN (Python)
                  '0-b5e6f2a9c1d4e3f8a7b6c5d4e3f2a1b']) n           -- a hyphen anywhere (Python)
              where ql.name_is_uuid(n)),
  array['0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b', '0B5E6F2A-9C1D-4E3F-8A7B-6C5D4E3F2A1B',
        '0b5e6f2a9c1d4e3f8a7b6c5d4e3f2a1b', '0b5e-6f2a-9c1d-4e3f-8a7b-6c5d-4e3f-2a1b',
        '{0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b}', 'urn:uuid:0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b',
        '0-b5e6f2a9c1d4e3f8a7b6c5d4e3f2a1b'],
  'every spelling of a uuid reads as one');
select is(array(select n from unnest(array[
                  'build', 'deadbeef', 'x0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b', '0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1',
                  '0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b0', '0g5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b',
                  '0b5e6f2a.9c1d.4e3f.8a7b.6c5d4e3f2a1b', 'release-2026-12-04']) n
              where ql.name_is_uuid(n)),
  array[]::text[], 'a name with other characters, one digit too few or too many, or a non-hex letter is not a uuid');
select is(ql.name_is_uuid(E'0b5e6f2a-9c1d-4e3f-8a7b-6c5d4e3f2a1b\n'), false,
  'a trailing newline is not dropped: the anchors match the whole text');
select is(ql.name_is_uuid(null), null, 'NULL for NULL');
select is(ql.name_is_uuid(''), false, 'the empty text is not a uuid');

select * from finish();
rollback;
