-- 0001_init (SQLite): the control plane's schema.
--
-- Conventions, the same in both backends: times are UTC microseconds since
-- the Unix epoch (INTEGER); JSON is TEXT; bytes are BLOB; booleans are 0/1
-- integers. The allowed state names are CHECK constraints equal to
-- reconciler.HostStates and reconciler.RolloutStates (a test compares them).
-- Tables are STRICT, so a value of the wrong type is refused as in PostgreSQL.

-- channels: the latest verified release of each channel, exactly as signed,
-- and the ref the channel last opened a rollout for.
CREATE TABLE channels (
	channel         TEXT PRIMARY KEY,
	ref             TEXT NOT NULL,
	source_commit   TEXT NOT NULL,
	signed_at       INTEGER NOT NULL,
	fleet_body      BLOB NOT NULL,
	fleet_sig       BLOB NOT NULL,
	fleet_hash      TEXT NOT NULL,
	manifest_body   BLOB NOT NULL,
	manifest_sig    BLOB NOT NULL,
	manifest_hash   TEXT NOT NULL,
	verified_at     INTEGER NOT NULL,
	last_rolled_ref TEXT NOT NULL DEFAULT ''
) STRICT;

-- rollouts: every header field of reconciler.Rollout; frozen is the JSON of
-- what the rollout froze at open (waves, healthGate, onHealthFailure,
-- complianceMode, complianceFrameworks, edges, budgets).
CREATE TABLE rollouts (
	id                TEXT PRIMARY KEY,
	channel           TEXT NOT NULL,
	ref               TEXT NOT NULL,
	state             TEXT NOT NULL,
	wave              INTEGER NOT NULL,
	wave_phase        TEXT NOT NULL,
	opened_at         INTEGER NOT NULL,
	wave_started_at   INTEGER NOT NULL,
	updated_at        INTEGER NOT NULL,
	progress_at       INTEGER NOT NULL,
	reason            TEXT NOT NULL,
	manifest_hash     TEXT NOT NULL,
	failures_forgiven INTEGER NOT NULL,
	frozen            TEXT NOT NULL,
	CONSTRAINT rollouts_state CHECK (state IN ('Opening', 'Active', 'Converged', 'Halted', 'Reverting', 'Reverted', 'Failed', 'Cancelled', 'Superseded')),
	CONSTRAINT rollouts_wave_phase CHECK (wave_phase IN ('dispatching', 'soaking'))
) STRICT;
CREATE INDEX rollouts_channel_opened ON rollouts (channel, opened_at, id);

-- rollout_hosts: reconciler.RolloutHost; reason and blocked are Reason JSON,
-- budgets a JSON array of budget indexes.
CREATE TABLE rollout_hosts (
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
	CONSTRAINT rollout_hosts_state CHECK (state IN ('Pending', 'Activating', 'Soaking', 'Converged', 'Failed', 'Reverted', 'Deferred', 'Skipped', 'RollingBack'))
) STRICT, WITHOUT ROWID; -- rows live in the primary key's b-tree: one b-tree fewer to write per host
CREATE INDEX rollout_hosts_hostname ON rollout_hosts (hostname);
-- Hosts in flight: the rollouts that still move hosts.
CREATE INDEX rollout_hosts_in_flight ON rollout_hosts (rollout_id) WHERE state IN ('Activating', 'Soaking', 'RollingBack');

-- rollout_manifests: the manifest each rollout serves, a copy of its
-- channel's manifest when it opened.
CREATE TABLE rollout_manifests (
	rollout_id TEXT PRIMARY KEY REFERENCES rollouts (id) ON DELETE CASCADE,
	body       BLOB NOT NULL,
	sig        BLOB NOT NULL,
	hash       TEXT NOT NULL
) STRICT;

-- host_status: each host's last reported status (HostStatus JSON), written
-- only when its digest changes; version counts the changes.
CREATE TABLE host_status (
	hostname TEXT PRIMARY KEY,
	status   TEXT NOT NULL,
	digest   TEXT NOT NULL,
	version  INTEGER NOT NULL
) STRICT;

-- host_seen: each host's last check-in, written in batches, apart from the
-- status so that a check-in without news writes one small row.
CREATE TABLE host_seen (
	hostname  TEXT PRIMARY KEY,
	last_seen INTEGER NOT NULL
) STRICT;

-- watermark: one row; changes grows with every write a tick must see (a
-- status that changed, an activation, an intent, a release), so replicas
-- can tell that something changed without reading it.
CREATE TABLE watermark (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	changes INTEGER NOT NULL
) STRICT;
INSERT INTO watermark (id, changes) VALUES (1, 0);

-- intents: operator intents; result is the IntentResult JSON once a tick
-- consumed the intent ('' before).
CREATE TABLE intents (
	id         TEXT PRIMARY KEY,
	rollout_id TEXT NOT NULL,
	kind       TEXT NOT NULL,
	actor      TEXT NOT NULL,
	at         INTEGER NOT NULL,
	consumed   INTEGER NOT NULL DEFAULT 0 CHECK (consumed IN (0, 1)),
	result     TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX intents_unconsumed ON intents (at, id) WHERE consumed = 0;

-- deferrals: the last tick's deferrals, in its order (seq).
CREATE TABLE deferrals (
	seq        INTEGER PRIMARY KEY,
	channel    TEXT NOT NULL,
	ref        TEXT NOT NULL,
	blocked_by TEXT NOT NULL
) STRICT;

-- events: the journal. from_state and to_state are a transition's states;
-- reason is Reason JSON; wave is -1 when none.
CREATE TABLE events (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	at         INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	rollout_id TEXT NOT NULL,
	channel    TEXT NOT NULL,
	wave       INTEGER NOT NULL,
	host       TEXT NOT NULL,
	from_state TEXT NOT NULL,
	to_state   TEXT NOT NULL,
	reason     TEXT NOT NULL
) STRICT;
CREATE INDEX events_rollout ON events (rollout_id, id);
CREATE INDEX events_host ON events (host, id);
CREATE INDEX events_channel ON events (channel, id);
CREATE INDEX events_at ON events (at);

-- leases: named leases (the tick lease elects the replica that ticks);
-- epoch increases with every new holder, for fencing. holder is '' when
-- the lease was released.
CREATE TABLE leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	epoch      INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
) STRICT;
