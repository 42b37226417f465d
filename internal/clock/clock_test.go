package clock

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

// TestFakeTimer: a timer fires once, when the clock passes its deadline,
// and not after Stop.
func TestFakeTimer(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("fired early")
	}
	f.Advance(time.Millisecond)
	if at, ok := fired(tm.C()); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired %v at %s, want at %s", ok, at, t0.Add(time.Second))
	}
	f.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok || f.Pending() != 0 {
		t.Fatal("a timer fired twice")
	}
	stopped := f.NewTimer(time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop does not report whether the timer was pending")
	}
	f.Advance(time.Hour)
	if _, ok := fired(stopped.C()); ok {
		t.Fatal("a stopped timer fired")
	}
}

// TestFakeTicker: a ticker fires every period; ticks its reader has not
// taken are dropped, and the next one is on the period's grid.
func TestFakeTicker(t *testing.T) {
	f := NewFake(t0)
	tk := f.NewTicker(10 * time.Second)
	f.Advance(10 * time.Second)
	if at, ok := fired(tk.C()); !ok || !at.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("first tick %v at %s", ok, at)
	}
	f.Advance(35 * time.Second) // 20, 30, 40 due: one delivered
	if at, ok := fired(tk.C()); !ok || !at.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("after a long advance: %v at %s", ok, at)
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("dropped ticks were delivered")
	}
	f.Advance(5 * time.Second)
	if at, ok := fired(tk.C()); !ok || !at.Equal(t0.Add(50*time.Second)) {
		t.Fatalf("next tick %v at %s, want on the grid at +50s", ok, at)
	}
	tk.Stop()
	f.Advance(time.Minute)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
}

// TestFakeAfterFunc: a function runs once, when the clock passes its
// deadline, and not after Stop.
func TestFakeAfterFunc(t *testing.T) {
	f := NewFake(t0)
	ran := make(chan time.Time, 2)
	tm := f.AfterFunc(time.Second, func() { ran <- f.Now() })
	if tm.C() != nil {
		t.Fatal("an AfterFunc timer has a channel")
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-ran:
		t.Fatal("ran early")
	default:
	}
	f.Advance(time.Millisecond)
	if at := <-ran; at.Before(t0.Add(time.Second)) {
		t.Fatalf("ran at %s", at)
	}
	if tm.Stop() || f.Pending() != 0 {
		t.Fatal("a timer that ran is still pending")
	}
	stopped := f.AfterFunc(time.Second, func() { ran <- f.Now() })
	if !stopped.Stop() {
		t.Fatal("Stop does not report a pending function")
	}
	f.Advance(time.Hour)
	select {
	case <-ran:
		t.Fatal("a stopped function ran")
	default:
	}
}

// TestFakeMade: a test can wait for a loop to make its next timer.
func TestFakeMade(t *testing.T) {
	f := NewFake(t0)
	made := f.Made()
	go f.NewTimer(time.Second)
	<-made
	if f.Pending() != 1 {
		t.Fatalf("%d pending", f.Pending())
	}
}

// TestReal: the real clock's timers fire.
func TestReal(t *testing.T) {
	var c Clock = Real{}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	tk := c.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
	ran := make(chan struct{})
	if af := c.AfterFunc(time.Millisecond, func() { close(ran) }); af.C() != nil {
		t.Fatal("an AfterFunc timer has a channel")
	}
	<-ran
	if c.Now().IsZero() {
		t.Fatal("zero time")
	}
}
