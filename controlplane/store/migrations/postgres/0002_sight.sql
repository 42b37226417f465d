-- 0002_sight (PostgreSQL): what the control plane can see (rfcs/0003 rule 6).

-- watch: one row; the control plane's current unbroken watch over its
-- hosts began at since, and its last committed tick was at alive_at. A
-- tick that finds alive_at older than its gap tolerance (a restart, a lost
-- database, a restored backup) starts a new watch.
CREATE TABLE watch (
	id       INTEGER PRIMARY KEY CHECK (id = 1),
	since    BIGINT NOT NULL,
	alive_at BIGINT NOT NULL
);

-- visibility: the channels in partial visibility after the last tick, and
-- those that left it less than an offline threshold ago (ended, else 0).
CREATE TABLE visibility (
	channel TEXT PRIMARY KEY,
	since   BIGINT NOT NULL,
	ended   BIGINT NOT NULL,
	silent  INTEGER NOT NULL,
	total   INTEGER NOT NULL
);
