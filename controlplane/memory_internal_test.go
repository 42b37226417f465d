package controlplane

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestTrimReturnsWhatABurstLeft: with the collector's goal far away (a
// quiet replica: no collection since the last look), 96 MiB of garbage
// make a trim due; the trim collects and returns it, so that the heap
// holds about what is live again; right after, with nothing new, none is
// due; none is after a collection; and none with GOGC=off.
func TestTrimReturnsWhatABurstLeft(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(1_000_000))
	// What earlier tests left, collected and returned: a heap that holds
	// about what is live.
	debug.FreeOSMemory()
	h := newHeapReader()
	prev := h.read()
	if trimDue(prev, h.read(), 0) {
		t.Fatalf("a trim is due right after the free memory was returned: %+v", prev)
	}
	var sink [][]byte
	for range 96 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	before := h.read()
	if !trimDue(prev, before, 0) {
		t.Fatalf("96 MiB of garbage, and no trim due: before %+v, now %+v", prev, before)
	}
	after, trimmed := h.trim(prev)
	if !trimmed {
		t.Fatal("trim did nothing")
	}
	if after.cycles == before.cycles || after.held > after.live+after.live/4+trimSlack {
		t.Fatalf("after the trim the heap holds %d MiB with %d MiB live (before: %d MiB), collections %d → %d",
			after.held>>20, after.live>>20, before.held>>20, before.cycles, after.cycles)
	}
	if _, again := h.trim(after); again {
		t.Fatal("a second trim was due with nothing allocated")
	}
	// What the heap held after the trim is its floor: a heap that holds
	// more than a quarter above what is live (the room between objects
	// that no collection gives back) is not trimmed again and again.
	if floor := after.held + trimSlack/2; trimDue(after, heapState{cycles: after.cycles, live: after.live, held: floor}, after.held) ||
		!trimDue(after, heapState{cycles: after.cycles, live: after.live, held: after.held + 2*trimSlack}, after.held) {
		t.Fatal("the floor a trim leaves does not decide the next")
	}
	// A collection since the last look: the replica is busy, left alone.
	for range 96 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC()
	for range 96 {
		sink = append(sink, make([]byte, 1<<20))
	}
	_ = sink
	if _, busy := h.trim(after); busy {
		t.Fatal("trimmed although a collection ran since the last look")
	}
	debug.SetGCPercent(-1)
	prev = h.read()
	for range 96 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	if _, off := h.trim(prev); off {
		t.Fatal("trimmed with GOGC=off")
	}
}
