-- 0010_lz4: PostgreSQL compresses the columns that hold a whole fleet
-- with lz4 from here on. SQLite does not compress values: nothing to do.
SELECT 1;
