package controlplane

import (
	"sync"

	"github.com/nixfleet/nixfleet/controlplane/store"
)

// leadership is whether this replica holds the tick lease (rfcs/0006
// §Tick loop 1). The ticker's lease loop sets it; anyone may read it; those
// whose work starts or stops with it subscribe instead of asking.
type leadership struct {
	// setMu orders the changes and their notices: the subscribers hear
	// them in the order they happened (the lease loop and a refused tick
	// both set it).
	setMu   sync.Mutex
	mu      sync.Mutex
	lease   store.Lease
	leading bool
	subs    []func(l store.Lease, leading bool)
}

// current is the lease held, and whether it is held.
func (l *leadership) current() (store.Lease, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease, l.leading
}

// subscribe has fn told of every change between leading and not, in the
// order of subscription and of the changes, on the goroutine that set
// it, after the change is visible to current. fn must not block, nor set
// the leadership.
func (l *leadership) subscribe(fn func(lease store.Lease, leading bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subs = append(l.subs, fn)
}

// set records the lease held (a renewal moves its expiry) or that none is
// (leading false), and tells the subscribers when leading changed, which
// it reports.
func (l *leadership) set(lease store.Lease, leading bool) (changed bool) {
	if !leading {
		lease = store.Lease{}
	}
	l.setMu.Lock()
	defer l.setMu.Unlock()
	l.mu.Lock()
	changed = leading != l.leading
	l.lease, l.leading = lease, leading
	subs := l.subs
	l.mu.Unlock()
	if changed {
		for _, fn := range subs {
			fn(lease, leading)
		}
	}
	return changed
}
