package controlplane

import "context"

// TickNow runs one tick on this replica, exactly as the tick loop does
// (when it leads: the tick, its metrics, the assignment refresh), and
// returns when it is done. Benchmarks time ticks at fleet scale with it.
func (s *Server) TickNow(ctx context.Context) { s.ticker.tick(ctx) }

// TagTTL is how long a status tag is trusted (rfcs/0007 §Status tags).
const TagTTL = tagTTL
