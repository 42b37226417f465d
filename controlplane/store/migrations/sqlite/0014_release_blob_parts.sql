-- 0014_release_blob_parts: a large release blob may be kept in parts
-- (PostgreSQL writes a big fleet.resolved.json faster as rows of 7 KiB
-- than as one TOAST value); release_blobs.parts counts them, 0 when the
-- body is in release_blobs.body. SQLite keeps every body whole; the table
-- is here so that both schemas read alike.
CREATE TABLE release_blob_parts (
	id   TEXT NOT NULL,
	seq  INTEGER NOT NULL,
	part BLOB NOT NULL,
	PRIMARY KEY (id, seq)
) STRICT;
ALTER TABLE release_blobs ADD COLUMN parts INTEGER NOT NULL DEFAULT 0;
