package controlplane

import "sync"

// The parts of a replica — the source that reads git, the hub that
// watches the store, the ticker that ticks — do not call one another.
// Each posts what happened on one board, and Server.Run, the replica's one
// visible loop, reads it and does what follows (rfcs/0006 §Tick loop):
//
//	wakeTick    a release, a status, an activation or an intent was
//	            written: the leader ticks (after its debounce);
//	wakeTicked  this replica committed a tick: the hub reloads the
//	            assignments and wakes long-polls, followers and intents;
//	wakeQuiet   this replica's tick found nothing new to decide: the
//	            hub wakes whoever waits for a tick, and reloads nothing;
//	wakePolled  the source finished a poll of the fleet repository (a
//	            release refused or waiting shows in the status): the
//	            hub wakes whoever waits for news.
//
// Posts coalesce and never block: a part that posts twice before Run
// reads is seen once, as a tick or a reload covers both.
type wake uint8

const (
	wakeTick wake = 1 << iota
	wakeTicked
	wakeQuiet
	wakePolled
)

// board collects posts until Run takes them.
type board struct {
	mu  sync.Mutex
	set wake
	ch  chan struct{} // holds one token while posts wait
}

func newBoard() *board { return &board{ch: make(chan struct{}, 1)} }

// post records w and wakes the reader.
func (b *board) post(w wake) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.set |= w
	b.mu.Unlock()
	select {
	case b.ch <- struct{}{}:
	default:
	}
}

// take returns what was posted since the last take, and clears it.
func (b *board) take() wake {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.set
	b.set = 0
	return w
}
