package controlplane

import "context"

// TickNow runs one tick on this replica, exactly as the tick loop does
// (when it leads: the tick, its metrics, the assignment refresh), and
// returns when it is done. Benchmarks time ticks at fleet scale with it.
func (s *Server) TickNow(ctx context.Context) {
	s.ticker.tick(ctx)
	s.hub.ticked(ctx, s.ticker.deltas.take())
}

// TagTTL is how long a status tag is trusted (rfcs/0007 §Status tags).
const TagTTL = tagTTL

// Test signals: tests of the package wait for what happened instead of
// sleeping.

// Changed returns a channel closed when this replica next ticks, sees new
// events in the store, or finishes a poll of the fleet repository. Take it
// before looking at the state, and look again when it closes.
func (s *Server) Changed() <-chan struct{} { return s.hub.followSignal() }

// Kick asks the leader for a tick, as a recorded status or intent does.
func (s *Server) Kick() { s.board.post(wakeTick) }

// FlushSeen writes the last-seen times the hub has collected, as it does
// every second.
func (s *Server) FlushSeen(ctx context.Context) error { return s.hub.flush(ctx) }

// PruneHostsNow forgets the hosts that left the fleet, as the leader's
// hourly prune does.
func (s *Server) PruneHostsNow(ctx context.Context) { s.pruneHosts(ctx) }
