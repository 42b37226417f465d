-- 0012_rollout_hosts_owed: the rollouts whose Pending host rows a tick
-- left to a second transaction. The tick that opens a rollout commits
-- the rollout and its dispatched hosts first, so the dispatch goes out
-- without waiting for a row per host of a large fleet; the rest follow
-- at once, and the mark goes with them. A mark left (the leader stopped
-- in between) makes the next leader write the missing rows from the
-- rollout's manifest before it loads anything (rfcs/0006 §Tick loop).
CREATE TABLE rollout_hosts_owed (
	rollout_id TEXT PRIMARY KEY
);
