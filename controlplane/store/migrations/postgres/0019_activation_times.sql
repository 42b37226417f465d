-- 0019_activation_times: what the leader measured of each host's
-- activations (rfcs/0014), the forecasts' model of the host, written beside
-- its ticks: one row per host, replaced by each new measurement. typical_ms
-- is the time from an activation's dispatch to its confirm, smoothed over
-- the host's activations (milliseconds); samples how many activations it
-- has seen; measured_at the time of the latest. Keyed by hostname without
-- a foreign key, like host_status and host_seen: PruneHosts forgets it with
-- them.
CREATE TABLE activation_times (
	hostname    TEXT PRIMARY KEY,
	typical_ms  BIGINT NOT NULL,
	samples     INTEGER NOT NULL,
	measured_at BIGINT NOT NULL
);
