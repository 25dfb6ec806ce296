-- Tests ql.session_fence: NULL for a live, unexpired session of this Worker and generation; else the reason, in
-- order: stale_session (none, another Worker's, ended), session_expired, stale_generation.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(8);

select volatility_is('ql', 'session_fence', array['ql.worker_sessions', 'uuid', 'bigint', 'bigint'], 'stable',
                     'stable (ql.outcome casts to enums), so it inlines into the renewal''s WHERE');
select pg_temp.mk_worker() as w, pg_temp.mk_worker('default', 'cert-b') as w2 \gset
select pg_temp.open_session(:'w') as s \gset
create function pg_temp.sess(p_id uuid) returns ql.worker_sessions language sql
return (select s from ql.worker_sessions s where s.id = p_id);
select expires_at_ms as exp from ql.worker_sessions where id = :'s' \gset

select is(ql.session_fence(pg_temp.sess(:'s'), :'w', 1, :exp - 1), null, 'a live unexpired session of the Worker holds');
select is(ql.session_fence(null::ql.worker_sessions, :'w', 1, :exp - 1) ->> 'reason', 'stale_session',
          'no session: stale_session');
select is(ql.session_fence(pg_temp.sess(:'s'), :'w2', 1, :exp - 1) ->> 'reason', 'stale_session',
          'another Worker''s session: stale_session');
select is(ql.session_fence(pg_temp.sess(:'s'), :'w', 1, :exp) ->> 'reason', 'session_expired',
          'at its expiry: session_expired');
select is(ql.session_fence(pg_temp.sess(:'s'), :'w', 2, :exp - 1) ->> 'reason', 'stale_generation',
          'another generation: stale_generation');
select is(ql.session_fence(pg_temp.sess(:'s'), :'w', 2, :exp), ql.outcome('fenced', 'session_expired'),
          'expiry is checked before the generation');
update ql.worker_sessions set status = 'closed', ended_at_ms = ql.now_ms() where id = :'s';
select is(ql.session_fence(pg_temp.sess(:'s'), :'w', 2, :exp), ql.outcome('fenced', 'stale_session'),
          'an ended session: stale_session, before anything else');

select * from finish();
rollback;
