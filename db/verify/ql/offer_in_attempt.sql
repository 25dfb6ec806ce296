-- Verify qinglong:ql/offer_in_attempt on pg
select session_id, offer_expires_at_ms, pull_id from ql.run_attempts where false;
select 1 / (to_regclass('ql.offers') is null)::int;
select 1 / (to_regclass('ql.run_attempts_offer_id_key') is null)::int;
