package controlplane

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// Memory a burst leaves behind (rfcs/0006 §Check-ins at scale 6). Go's
// collector lets the heap grow to a goal, GOGC percent above what was
// live after the last collection, and keeps what it freed up to that goal.
// A burst — a fleet reconnecting, onboarding, a big release — sets a
// high goal, and when the control plane falls quiet afterwards (most
// agents waiting in long-polls, which allocate little) no collection
// comes to lower it for minutes, and the runtime hands the memory back
// slowly: a quiet control plane looks two or three times its size from
// outside. So every trimEvery a replica looks: when no collection ran
// since it last looked and the heap holds more than a quarter above what
// is live, or above what it held after its last trim (what is live and
// the room between objects that a collection cannot give back), plus
// trimSlack, it collects and returns the free memory to the system. A
// replica that collects by itself within trimEvery is left alone; any
// other pays at most one collection every trimEvery, and with little
// garbage none.

const (
	trimEvery = 10 * time.Second
	trimSlack = 16 << 20
)

// The runtime metrics the trimmer reads, by their index in trimSamples.
const (
	sampleCycles = iota
	sampleLive
	sampleObjects
	sampleUnused
	sampleFree
	sampleGOGC
)

var trimSamples = [...]string{
	sampleCycles:  "/gc/cycles/total:gc-cycles",
	sampleLive:    "/gc/heap/live:bytes",
	sampleObjects: "/memory/classes/heap/objects:bytes",
	sampleUnused:  "/memory/classes/heap/unused:bytes",
	sampleFree:    "/memory/classes/heap/free:bytes",
	sampleGOGC:    "/gc/gogc:percent",
}

// heapState is what the trimmer reads: the collections so far, the heap
// live after the last, and the heap the process holds (objects, live or
// not, and the free memory not returned to the system).
type heapState struct {
	cycles     uint64
	live, held uint64
	// off: GOGC=off, the collector runs only at GOMEMLIMIT; the trimmer
	// leaves it so.
	off bool
}

func readHeap(s []rtmetrics.Sample) heapState {
	rtmetrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	gogc := s[sampleGOGC].Value
	off := gogc.Kind() == rtmetrics.KindUint64 && int64(gogc.Uint64()) < 0
	return heapState{cycles: v(sampleCycles), live: v(sampleLive),
		held: v(sampleObjects) + v(sampleUnused) + v(sampleFree), off: off}
}

// trimDue reports whether the heap, with no collection since prev, holds
// trimSlack more than a quarter above what is live, and than floor (what
// it held after the last trim).
func trimDue(prev, now heapState, floor uint64) bool {
	return !now.off && now.cycles == prev.cycles && now.held > max(floor, now.live+now.live/4)+trimSlack
}

// trimMemory returns the memory a burst left, while the replica is quiet,
// until ctx ends.
func (s *Server) trimMemory(ctx context.Context) {
	h := newHeapReader()
	tk := time.NewTicker(trimEvery)
	defer tk.Stop()
	prev := h.read()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		var trimmed bool
		if prev, trimmed = h.trim(prev); trimmed {
			s.m.memoryTrims.Inc()
			s.log.Debug("returned the memory a burst left", "held_MiB", prev.held>>20, "live_MiB", prev.live>>20)
		}
	}
}

// heapReader reads heapState, and trims.
type heapReader struct {
	samples []rtmetrics.Sample
	floor   uint64 // held after the last trim
}

func newHeapReader() *heapReader {
	h := &heapReader{samples: make([]rtmetrics.Sample, len(trimSamples))}
	for i, name := range trimSamples {
		h.samples[i].Name = name
	}
	return h
}

func (h *heapReader) read() heapState { return readHeap(h.samples) }

// trim collects and returns the free memory when trimDue, and returns the
// state after.
func (h *heapReader) trim(prev heapState) (heapState, bool) {
	now := h.read()
	if !trimDue(prev, now, h.floor) {
		return now, false
	}
	debug.FreeOSMemory()
	now = h.read()
	h.floor = now.held
	return now, true
}
