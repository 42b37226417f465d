// Package clock is the one seam between the control plane's loops and
// time: the wall clock, tickers and timers. Production code uses Real;
// tests use a Fake that moves only when told, so that they wait for what
// happened instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock reads the time and makes tickers and timers.
type Clock interface {
	Now() time.Time
	// Since is Now().Sub(t).
	Since(t time.Time) time.Duration
	NewTicker(d time.Duration) Ticker
	NewTimer(d time.Duration) Timer
	// AfterFunc runs f on its own goroutine once d has passed, unless
	// stopped first; until then it holds no goroutine. Its Timer's C is
	// nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Ticker delivers the time on C every period until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Timer delivers the time on C once, when it fires, unless stopped.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// Real is the system clock.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// Since is time.Since.
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTicker is time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Fake is a clock that moves only by Advance. Tickers and timers fire, in
// order of their deadlines, as Advance passes them; like the real ones
// they drop a tick their reader has not taken yet.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter
	added   chan struct{} // closed and replaced when a ticker or timer is made
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, added: make(chan struct{})}
}

type fakeWaiter struct {
	at     time.Time
	period time.Duration // 0 for a timer
	c      chan time.Time
	fn     func() // AfterFunc's, run instead of sending on c
	f      *Fake
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since is the fake time passed since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTicker makes a ticker that fires every d of fake time.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.add(d, d, nil)}
}

// NewTimer makes a timer that fires once, d of fake time from now.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.add(d, 0, nil) }

// AfterFunc runs fn on a goroutine of its own when Advance passes d of
// fake time from now.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer { return fakeFuncTimer{f.add(d, 0, fn)} }

func (f *Fake) add(d, period time.Duration, fn func()) *fakeWaiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &fakeWaiter{at: f.now.Add(d), period: period, fn: fn, f: f}
	if fn == nil {
		w.c = make(chan time.Time, 1)
	}
	f.waiters = append(f.waiters, w)
	close(f.added)
	f.added = make(chan struct{})
	if d <= 0 {
		f.fireLocked()
	}
	return w
}

// Made returns a channel closed when the next ticker or timer is made: a
// test waits on it for a loop to reach the point where it sleeps.
func (f *Fake) Made() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.added
}

// Pending is the number of tickers and timers not stopped or fired.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// Advance moves the clock by d, firing what falls due on the way.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fireLocked()
}

// fireLocked fires every waiter due at now, oldest deadline first.
func (f *Fake) fireLocked() {
	for {
		var next *fakeWaiter
		for _, w := range f.waiters {
			if !w.at.After(f.now) && (next == nil || w.at.Before(next.at)) {
				next = w
			}
		}
		if next == nil {
			return
		}
		if next.fn != nil {
			go next.fn()
		} else {
			select {
			case next.c <- next.at:
			default: // the reader has not taken the last one: dropped
			}
		}
		if next.period > 0 {
			// Ticks that fall due while the reader holds one are dropped.
			next.at = next.at.Add((f.now.Sub(next.at)/next.period + 1) * next.period)
		} else {
			f.removeLocked(next)
		}
	}
}

func (f *Fake) removeLocked(w *fakeWaiter) bool {
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			return true
		}
	}
	return false
}

func (w *fakeWaiter) C() <-chan time.Time { return w.c }

type fakeTicker struct{ w *fakeWaiter }

// fakeFuncTimer is an AfterFunc's timer: it has no channel.
type fakeFuncTimer struct{ w *fakeWaiter }

func (t fakeFuncTimer) C() <-chan time.Time { return nil }
func (t fakeFuncTimer) Stop() bool          { return t.w.Stop() }

func (t fakeTicker) C() <-chan time.Time { return t.w.c }
func (t fakeTicker) Stop()               { t.w.Stop() }

// Stop stops the ticker or timer; for a timer, it reports whether it had
// not fired yet.
func (w *fakeWaiter) Stop() bool {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	return w.f.removeLocked(w)
}
