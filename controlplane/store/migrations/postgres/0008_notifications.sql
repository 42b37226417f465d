-- 0008_notifications (PostgreSQL): outbound notifications (rfcs/0006
-- §Notifications).

-- notification_cursors: the outbox. One row per webhook sink: last_event
-- is the id of the last journal event the sink was sent or passed (its
-- filter skipped it), updated_at when that last changed (microseconds).
-- The leader's notifier moves it forward with a compare-and-set after
-- each delivery; a sink without a row starts at the journal's end.
CREATE TABLE notification_cursors (
	sink       TEXT PRIMARY KEY,
	last_event BIGINT NOT NULL,
	updated_at BIGINT NOT NULL
);

-- watermark.pruned_events: the newest event id retention (Prune) has
-- deleted, 0 when none: a sink whose cursor is below it missed events.
ALTER TABLE watermark ADD COLUMN pruned_events BIGINT NOT NULL DEFAULT 0;
