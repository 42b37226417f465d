-- 0011_rollout_hosts_no_fk: a rollout's host rows no longer reference
-- their rollout by a foreign key. Its check ran once per row inserted, a
-- trigger each, and doubled the time the tick opening a rollout spent
-- writing its rows (100,000 rows: BENCHMARKS.md, store tick open). The
-- store writes a rollout before its hosts in the same transaction, and
-- Prune deletes a rollout's hosts with it, as the cascade did.
ALTER TABLE rollout_hosts DROP CONSTRAINT IF EXISTS rollout_hosts_rollout_id_fkey;
