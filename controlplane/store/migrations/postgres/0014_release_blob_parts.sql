-- 0014_release_blob_parts: a large release blob (the fleet.resolved.json
-- of a big fleet) is kept in parts of 7 KiB, each a row that stays in its
-- page, instead of one value that PostgreSQL cuts into 2 KB TOAST chunks:
-- writing 25 MB took ≈380 ms of the server's CPU as one value and ≈130 ms
-- in parts. release_blobs.parts counts a blob's parts; 0 is a blob whose
-- body is in release_blobs.body (every blob before this migration, every
-- small one, and every one on SQLite).
CREATE TABLE release_blob_parts (
	id   TEXT NOT NULL,
	seq  INTEGER NOT NULL,
	part BYTEA NOT NULL,
	PRIMARY KEY (id, seq)
);
ALTER TABLE release_blob_parts ALTER COLUMN part SET STORAGE MAIN;
DO $$
BEGIN
	ALTER TABLE release_blob_parts ALTER COLUMN part SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
	RAISE NOTICE 'this PostgreSQL has no lz4: release blob parts stay compressed with pglz';
END
$$;
ALTER TABLE release_blobs ADD COLUMN parts INTEGER NOT NULL DEFAULT 0;
