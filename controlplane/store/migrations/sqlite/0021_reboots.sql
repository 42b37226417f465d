-- 0021_reboots: the Rebooting host state (rfcs/0004), in flight like
-- Activating, and each rollout's reboot step (rfcs/0003 rule 17), which
-- a host's assignment carries (reconciler.Assignment.Reboot): '' for a
-- rollout that orders no reboot, else the JSON of store.rebootColumn,
-- written when the rollout opens. Rollouts kept before ordered none.
-- SQLite changes a CHECK constraint only by rebuilding the table.
CREATE TABLE rollout_hosts_0021 (
	rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
	hostname   TEXT NOT NULL,
	wave       INTEGER NOT NULL,
	target     TEXT NOT NULL,
	state      TEXT NOT NULL,
	since      INTEGER NOT NULL,
	previous   TEXT NOT NULL,
	reason     TEXT NOT NULL,
	blocked    TEXT NOT NULL,
	budgets    TEXT NOT NULL,
	PRIMARY KEY (rollout_id, hostname),
	CONSTRAINT rollout_hosts_state CHECK (state IN ('Pending', 'Activating', 'Soaking', 'Converged', 'Failed', 'Reverted', 'Deferred', 'Skipped', 'RollingBack', 'Rebooting'))
) STRICT, WITHOUT ROWID;
INSERT INTO rollout_hosts_0021 (rollout_id, hostname, wave, target, state, since, previous, reason, blocked, budgets)
	SELECT rollout_id, hostname, wave, target, state, since, previous, reason, blocked, budgets FROM rollout_hosts;
DROP TABLE rollout_hosts;
ALTER TABLE rollout_hosts_0021 RENAME TO rollout_hosts;
CREATE INDEX rollout_hosts_hostname ON rollout_hosts (hostname);
CREATE INDEX rollout_hosts_in_flight ON rollout_hosts (rollout_id) WHERE state IN ('Activating', 'Soaking', 'RollingBack', 'Rebooting');
ALTER TABLE rollouts ADD COLUMN reboot TEXT NOT NULL DEFAULT '';
