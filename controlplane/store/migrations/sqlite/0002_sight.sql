-- 0002_sight (SQLite): what the control plane can see (rfcs/0003 rule 6).

-- watch: one row; the control plane's current unbroken watch over its
-- hosts began at since, and its last committed tick was at alive_at. A
-- tick that finds alive_at older than its gap tolerance (a restart, a lost
-- database, a restored backup) starts a new watch.
CREATE TABLE watch (
	id       INTEGER PRIMARY KEY CHECK (id = 1),
	since    INTEGER NOT NULL,
	alive_at INTEGER NOT NULL
) STRICT;

-- visibility: the channels in partial visibility after the last tick, and
-- those that left it less than an offline threshold ago (ended, else 0).
CREATE TABLE visibility (
	channel TEXT PRIMARY KEY,
	since   INTEGER NOT NULL,
	ended   INTEGER NOT NULL,
	silent  INTEGER NOT NULL,
	total   INTEGER NOT NULL
) STRICT;
