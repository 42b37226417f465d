package controlplane

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Prefetch (rfcs/0006 §Prefetch): a host that waits in an Active rollout
// may realise its target before its wave, so that its dispatch only
// switches. What it may fetch is the reconciler's (reconciler.Coming and
// PrefetchFor); how many hosts fetch at once is bounded here, by fetch
// slots handed out with check-in answers:
//
//  1. A host that needs a fetch (PrefetchFor) is answered its target in
//     `prefetch` when it holds a slot for that closure, or when one is
//     free and it takes it: then its check-in is answered at once, not
//     held as a long-poll. Without a slot it is answered none (after its
//     long-poll, when a slot may have come free), and asks again at its
//     next check-in.
//  2. A slot is held until the host reports that closure prefetched,
//     runs it, or stops needing it (another target, another state, its
//     rollout stops): its next check-in gives the slot back. A host that
//     checks in no more gives it back slotTTL after its last check-in; one
//     that keeps checking in without ever reporting the closure (its
//     fetch keeps failing) gives it back slotMaxHold after it took it,
//     and takes none for slotTTL after that, so that others get their
//     turn.
//  3. A host that holds its target prefetched already is answered it too,
//     without a slot: the answer says that it is still the host's coming
//     target, so its agent keeps it (an agent drops a prefetched closure
//     that no answer names).
//
// Slots are per replica and in memory: behind a load balancer spreading
// agents over n replicas, up to n × the limit fetch at once, and a
// restarted replica forgets its slots (the hosts that held them fetch on,
// and give nothing back). The time is the server's clock (Config.Clock).

// DefaultPrefetchConcurrency is the default of nixfleet-cp's
// --prefetch-concurrency: fifty fetches at once keep a binary cache that
// serves a few gigabits per second busy without queueing requests behind
// each other, and fetch a fleet of 100,000 hosts' closures in about
// 2,000 rounds.
const DefaultPrefetchConcurrency = 50

const (
	// slotTTL frees the slot of a host that stopped checking in (an
	// agent checks in at least every minute; a host that vanished frees
	// its slot within ten).
	slotTTL = 10 * time.Minute
	// slotMaxHold bounds how long one host holds a slot: a fetch that
	// takes longer is hopeless or broken (a closure the cache lacks, a
	// path Nix refuses), and its agent retries it with back-off anyway.
	slotMaxHold = 30 * time.Minute
)

// prefetchSlots hands out the fetch slots of one replica.
type prefetchSlots struct {
	limit int
	now   func() time.Time

	mu   sync.Mutex
	held map[string]fetchSlot // by host
	// resting are hosts whose slot ran out at slotMaxHold, until when
	// they take none.
	resting map[string]time.Time
	// swept is when expire last ran.
	swept time.Time

	granted prometheus.Counter
}

// fetchSlot is one host's slot: the closure it fetches, when it took the
// slot and when it last checked in holding it.
type fetchSlot struct {
	closure          string
	granted, renewed time.Time
}

// newPrefetchSlots returns limit slots (0: prefetch off) and registers
// their metrics.
func newPrefetchSlots(limit int, now func() time.Time, reg prometheus.Registerer) *prefetchSlots {
	p := &prefetchSlots{limit: max(limit, 0), now: now, held: map[string]fetchSlot{}, resting: map[string]time.Time{}}
	p.granted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nixfleet_prefetch_granted_total", Help: "Fetch slots this replica gave hosts to prefetch their coming closure (renewals not counted).",
	})
	inUse := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nixfleet_prefetch_slots_in_use", Help: "Fetch slots of this replica held by hosts prefetching their coming closure (--prefetch-concurrency bounds them).",
	}, func() float64 { return float64(p.inUse()) })
	reg.MustRegister(p.granted, inUse)
	return p
}

// answer is the prefetch of a host's check-in answer (nil: none), from
// the host's assignment (ok false: none) and what its check-in reports it
// runs and holds prefetched. It takes, keeps or gives back the host's
// slot; taken reports a slot the host did not hold before this answer
// (its check-in is answered at once, not held as a long-poll).
func (p *prefetchSlots) answer(host string, a reconciler.Assignment, ok bool, current, prefetched string) (t *proto.PrefetchTarget, taken bool) {
	if p.limit == 0 {
		return nil, false
	}
	var ap *reconciler.Assignment
	if ok {
		ap = &a
	}
	c, coming := reconciler.Coming(ap, current)
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !coming:
		delete(p.held, host)
		return nil, false
	case c.Closure == prefetched:
		delete(p.held, host) // rule 3: it holds it, and needs no slot
		return &c, false
	}
	held, taken := p.take(host, c.Closure, now)
	if !held {
		return nil, false
	}
	return &c, taken
}

// take gives host a slot for closure, or renews the one it holds: held
// reports whether it holds one now, taken whether it did not before.
func (p *prefetchSlots) take(host, closure string, now time.Time) (held, taken bool) {
	if s, ok := p.held[host]; ok {
		if s.closure == closure && now.Sub(s.renewed) < slotTTL {
			if now.Sub(s.granted) < slotMaxHold {
				s.renewed = now
				p.held[host] = s
				return true, false
			}
			// Held too long: its turn is over.
			delete(p.held, host)
			p.resting[host] = now.Add(slotTTL)
			return false, false
		}
		delete(p.held, host) // another closure now, or expired
	}
	if until, ok := p.resting[host]; ok {
		if now.Before(until) {
			return false, false
		}
		delete(p.resting, host)
	}
	if len(p.held) >= p.limit && (now.Sub(p.swept) < slotSweepEvery || p.expire(now) == 0) {
		return false, false
	}
	p.held[host] = fetchSlot{closure: closure, granted: now, renewed: now}
	p.granted.Inc()
	return true, true
}

// slotSweepEvery bounds how often a check-in that finds every slot taken
// looks for expired ones: the slots expire in minutes, and a full table
// is the common case while a release goes out.
const slotSweepEvery = time.Second

// expire frees the slots of hosts that stopped checking in, and of those
// that held theirs too long (they rest), and forgets rests that ended; it
// returns how many slots it freed. It runs only when every slot is taken,
// at most every slotSweepEvery (and for the gauge), so a check-in seldom pays
// for it.
func (p *prefetchSlots) expire(now time.Time) int {
	p.swept = now
	n := 0
	for host, s := range p.held {
		switch {
		case now.Sub(s.renewed) >= slotTTL:
			delete(p.held, host)
			n++
		case now.Sub(s.granted) >= slotMaxHold:
			delete(p.held, host)
			p.resting[host] = now.Add(slotTTL)
			n++
		}
	}
	for host, until := range p.resting {
		if !now.Before(until) {
			delete(p.resting, host)
		}
	}
	return n
}

// inUse counts the slots held now.
func (p *prefetchSlots) inUse() int {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now)
	return len(p.held)
}
