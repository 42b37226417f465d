-- 0015_status_said: what each host said of itself (rfcs/0003 rule 8,
-- rfcs/0007 §Status tags). host_status.said is the digest of the stored
-- status without its activation (store.StatusDigest); host_seen.said_at is
-- the last check-in known to have carried that status, one whose digest
-- equals said: verdicts on a host's status rest on it, never on a later
-- check-in whose status write the store may have lost. Rows written
-- before this migration have said '' and are taken as said at their last
-- check-in until their status is compared with a check-in again.
ALTER TABLE host_status ADD COLUMN said TEXT NOT NULL DEFAULT '';
ALTER TABLE host_seen ADD COLUMN said_at INTEGER NOT NULL DEFAULT 0;
UPDATE host_seen SET said_at = last_seen;
