// Package kept is the leader's kept input: the reconciler's Input, held in
// memory between the ticks of one lease, so that a tick reads only what
// changed since the previous one (rfcs/0006 §Tick loop 3).
//
// Its one invariant: an Input equals a cold load of the store at its
// Marks under its Lease, and the host rows a Keeper says are owed are
// committed in a tick and held here, not yet in the store's tables.
//
// The package holds no SQL. The store reads what changed and tells the
// Input (Observe, Add, Apply); the control plane owns the Keeper and hands
// it to each tick. Which rollouts stay in the Input (reconciler.Live) and
// which one drives a host (reconciler.Drives) are the reconciler's rules;
// this package only applies them.
package kept

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/reconciler"
)

// Keeper is what a control plane keeps between its ticks: the kept input
// and the host rows a tick committed but could not write yet. Whoever
// holds its lock may read and replace both; a tick holds it throughout,
// so ticks on one Keeper run one at a time.
type Keeper struct {
	sync.Mutex
	// Input is the kept input; nil: the next tick loads in full.
	Input *Input
	// Owed are rows a committed tick left to write; nil when none.
	Owed *Owed
	// High are the counters the last committed tick on this Keeper read
	// (once, first; it reads no row stamped above them), whatever its
	// lease: counters only grow, so a store found below them lost writes
	// it had acknowledged.
	High Marks
}

// Lease names the tick lease an Input or owed rows belong to.
type Lease struct {
	Holder string
	Epoch  int64
}

// Marks are the store's change counters an Input is current with: status
// changes, last-seen times, and the epoch that moves when something is
// rewritten rather than appended (a manifest replaced, a prune).
type Marks struct{ Changes, Seen, Epoch int64 }

// Below reports whether any of m's counters is below o's: counters only
// grow, so a store at m lost writes made when it was at o.
func (m Marks) Below(o Marks) bool {
	return m.Changes < o.Changes || m.Seen < o.Seen || m.Epoch < o.Epoch
}

// Row is a host's record in a rollout, as the store writes it.
type Row struct {
	RolloutID string
	Host      *reconciler.RolloutHost
}

// Owed are rows a committed tick left to write (the Pending hosts of the
// rollouts it opened), for the next tick of the same lease to write
// first.
type Owed struct {
	Lease Lease
	Rows  []Row
	IDs   []string // the rollouts they belong to
}

// Head is what deciding liveness needs of a rollout the store holds,
// live or not.
type Head struct {
	ID, Channel string
	State       reconciler.RolloutState
	// Opened as the store keeps it: UTC, to the microsecond.
	Opened time.Time
}

// HeadOf is a rollout's Head.
func HeadOf(r *reconciler.Rollout) Head {
	return Head{ID: r.ID, Channel: r.Channel, State: r.State, Opened: Micro(r.OpenedAt)}
}

// Micro is t as the store keeps times: UTC, truncated to the microsecond.
func Micro(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }

// Input is the kept input.
type Input struct {
	Lease Lease
	Marks Marks
	heads map[string]Head // every rollout, live or not
	live  map[string]*reconciler.Rollout
	// inFlight counts, per live rollout, its hosts in flight.
	inFlight   map[string]int
	byHost     map[string][]slot // host -> where the live rollouts list it
	obs        map[string]reconciler.ObservedHost
	deferrals  []reconciler.Deferral
	visibility []reconciler.Visibility
}

// slot is where a live rollout lists a host: the rollout, and the host's
// index in its host list (sorted by name when the rollout opened, never
// reordered: a tick replaces a host's record in place).
type slot struct {
	ro *reconciler.Rollout
	i  int
}

// New keeps a cold load in, made at marks m under lease l; heads are every
// rollout the store holds. The Input takes in's rollouts and observed
// hosts as its own: the caller must not change them afterwards.
func New(l Lease, m Marks, heads []Head, in *reconciler.Input) *Input {
	k := &Input{Lease: l, Marks: m, heads: make(map[string]Head, len(heads)), live: map[string]*reconciler.Rollout{},
		inFlight: map[string]int{}, byHost: map[string][]slot{}, obs: in.Hosts,
		deferrals: slices.Clone(in.Deferrals), visibility: slices.Clone(in.Visibility)}
	for _, h := range heads {
		k.heads[h.ID] = h
	}
	for i := range in.Rollouts {
		ro := in.Rollouts[i]
		k.Add(&ro)
	}
	if k.obs == nil {
		k.obs = map[string]reconciler.ObservedHost{}
	}
	return k
}

// Add makes a rollout live.
func (k *Input) Add(ro *reconciler.Rollout) {
	k.live[ro.ID] = ro
	n := 0
	for i, h := range ro.Hosts {
		k.byHost[h.Hostname] = append(k.byHost[h.Hostname], slot{ro, i})
		if h.State.InFlight() {
			n++
		}
	}
	k.inFlight[ro.ID] = n
}

// drop takes a rollout out of the live ones.
func (k *Input) drop(id string) {
	ro := k.live[id]
	if ro == nil {
		return
	}
	for _, h := range ro.Hosts {
		slots := slices.DeleteFunc(k.byHost[h.Hostname], func(s slot) bool { return s.ro == ro })
		if len(slots) == 0 {
			delete(k.byHost, h.Hostname)
		} else {
			k.byHost[h.Hostname] = slots
		}
	}
	delete(k.live, id)
	delete(k.inFlight, id)
}

// Holds reports whether a rollout is live in the Input.
func (k *Input) Holds(id string) bool { return k.live[id] != nil }

// Knows reports whether the store held a rollout when the Input was made,
// or a tick opened it since.
func (k *Input) Knows(id string) bool { _, ok := k.heads[id]; return ok }

// Observed is what the Input holds of a host (zero when nothing).
func (k *Input) Observed(host string) reconciler.ObservedHost { return k.obs[host] }

// Observe records what the store now says of a host.
func (k *Input) Observe(host string, o reconciler.ObservedHost) { k.obs[host] = o }

// Fill sets the Input's parts of in: the live rollouts (oldest first;
// their host lists are the Input's own, which a tick must not modify),
// the observed hosts, the deferrals and the visibility records.
func (k *Input) Fill(in *reconciler.Input) {
	in.Rollouts = make([]reconciler.Rollout, 0, len(k.live))
	for _, ro := range k.live {
		in.Rollouts = append(in.Rollouts, *ro)
	}
	slices.SortFunc(in.Rollouts, func(a, b reconciler.Rollout) int {
		return cmp.Or(a.OpenedAt.Compare(b.OpenedAt), strings.Compare(a.ID, b.ID))
	})
	in.Hosts = k.obs
	in.Deferrals = slices.Clone(k.deferrals)
	if in.Deferrals == nil {
		in.Deferrals = []reconciler.Deferral{}
	}
	in.Visibility = slices.Clone(k.visibility)
	if in.Visibility == nil {
		in.Visibility = []reconciler.Visibility{}
	}
}

// Copy is the Input as a tick would see it, copied so that the ticks that
// follow may change the kept one: the observed hosts, and each live
// rollout with its host list (a tick replaces a rollout's header whole,
// and its hosts' records in place).
func (k *Input) Copy() reconciler.Input {
	var in reconciler.Input
	k.Fill(&in)
	in.Hosts = maps.Clone(in.Hosts)
	for i := range in.Rollouts {
		in.Rollouts[i].Hosts = slices.Clone(in.Rollouts[i].Hosts)
	}
	return in
}

// Changes are the hosts whose assignment a committed tick may have
// changed (Apply).
type Changes struct {
	// Urgent may have started an activation: the hosts the tick updated,
	// and those a rollout it opened holds past Pending (the dispatches of
	// its first wave).
	Urgent []string
	// Rollouts had every host's assignment touched: opened, changed state
	// (every assignment carries it), or left the Input.
	Rollouts []*reconciler.Rollout
}

// Apply applies a committed tick's Output to the Input (as
// reconciler.Apply does: in is what the tick decided from), lets the
// rollouts that are no longer live (reconciler.Live) leave it, and
// returns the hosts whose assignment the tick may have changed.
func (k *Input) Apply(in *reconciler.Input, out *reconciler.Output) Changes {
	var ch Changes
	for i := range out.Rollouts {
		u := &out.Rollouts[i]
		if u.New {
			ro := u.Rollout
			k.Add(&ro)
			k.heads[ro.ID] = HeadOf(&ro)
			ch.Rollouts = append(ch.Rollouts, &ro)
			for _, h := range ro.Hosts {
				if h.State != reconciler.HostPending {
					ch.Urgent = append(ch.Urgent, h.Hostname)
				}
			}
			continue
		}
		cur := k.live[u.Rollout.ID]
		if cur == nil {
			continue
		}
		hosts, state := cur.Hosts, cur.State
		*cur = u.Rollout
		cur.Hosts = hosts
		k.heads[cur.ID] = HeadOf(cur)
		if cur.State != state {
			ch.Rollouts = append(ch.Rollouts, cur)
		}
	}
	for i := range out.Hosts {
		u := &out.Hosts[i]
		cur := k.live[u.RolloutID]
		if cur == nil {
			continue
		}
		j := k.index(u.Host.Hostname, cur)
		if j < 0 {
			continue
		}
		if cur.Hosts[j].State.InFlight() {
			k.inFlight[cur.ID]--
		}
		if u.Host.State.InFlight() {
			k.inFlight[cur.ID]++
		}
		cur.Hosts[j] = u.Host
		ch.Urgent = append(ch.Urgent, u.Host.Hostname)
	}
	k.deferrals = slices.Clone(out.Deferrals)
	k.visibility = slices.Clone(out.Visibility)

	consumed := map[string]bool{}
	for _, res := range out.IntentResults {
		consumed[res.IntentID] = true
	}
	intended := map[string]bool{}
	for _, it := range in.Intents {
		if !consumed[it.ID] {
			intended[it.RolloutID] = true
		}
	}
	latest := k.latest()
	for id, ro := range k.live {
		f := reconciler.LiveFacts{Latest: latest[ro.Channel] == id, HostInFlight: k.inFlight[id] > 0, Intended: intended[id]}
		if !reconciler.Live(ro.State, f) {
			ch.Rollouts = append(ch.Rollouts, ro)
			k.drop(id)
		}
	}
	return ch
}

// latest maps each channel to its newest rollout (reconciler.Newer).
func (k *Input) latest() map[string]string {
	latest := map[string]string{}
	for _, h := range k.heads {
		cur, ok := latest[h.Channel]
		if c := k.heads[cur]; !ok || reconciler.Newer(h.Opened, h.ID, c.Opened, c.ID) {
			latest[h.Channel] = h.ID
		}
	}
	return latest
}

// ChangedAssignments are the assignments of every host in ch but those in
// skip (reported already); nil for a host no live rollout lists.
func (k *Input) ChangedAssignments(ch Changes, skip map[string]*reconciler.Assignment) map[string]*reconciler.Assignment {
	n := len(ch.Urgent)
	for _, ro := range ch.Rollouts {
		n += len(ro.Hosts)
	}
	assign := make(map[string]*reconciler.Assignment, n)
	add := func(h string) {
		if _, ok := skip[h]; ok {
			return
		}
		if _, ok := assign[h]; !ok {
			assign[h] = k.Assignment(h)
		}
	}
	for _, h := range ch.Urgent {
		add(h)
	}
	for _, ro := range ch.Rollouts {
		for _, h := range ro.Hosts {
			add(h.Hostname)
		}
	}
	return assign
}

// Assignment is a host's record in the live rollout that drives it
// (reconciler.Drives), nil when none lists it.
func (k *Input) Assignment(host string) *reconciler.Assignment {
	var best *reconciler.Assignment
	var bestOpened time.Time
	for _, s := range k.byHost[host] {
		ro := s.ro
		h := ro.Hosts[s.i]
		a := reconciler.Assignment{RolloutID: ro.ID, Channel: ro.Channel, RolloutState: ro.State, ManifestHash: ro.ManifestHash,
			Host: h, Soak: ro.WaveSoak(h.Wave), Reboot: ro.RebootOf(h.Wave)}
		// Compared as stored, to the microsecond, as a cold load does.
		opened := Micro(ro.OpenedAt)
		if best == nil || reconciler.Drives(a, opened, *best, bestOpened) {
			best, bestOpened = &a, opened
		}
	}
	return best
}

// Assignments is every host's assignment.
func (k *Input) Assignments() map[string]*reconciler.Assignment {
	out := make(map[string]*reconciler.Assignment, len(k.byHost))
	for host := range k.byHost {
		if a := k.Assignment(host); a != nil {
			out[host] = a
		}
	}
	return out
}

// index is the index of host in live rollout ro's host list, -1 when ro
// does not list it.
func (k *Input) index(host string, ro *reconciler.Rollout) int {
	for _, s := range k.byHost[host] {
		if s.ro == ro {
			return s.i
		}
	}
	return -1
}
