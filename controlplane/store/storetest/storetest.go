// Package storetest is the conformance suite of controlplane/store: one set
// of behavioural tests of the Store contract (package store's
// documentation) that every backend passes. A backend's tests call Run
// with a function that opens a fresh, empty store for each subtest.
//
// The suite drives real reconcile ticks (reconciler.Reconcile over fleets
// projected with manifest.Project) and checks after each that what the
// store loads next is reconciler.Apply(input, output), and that the
// reconciler decides the same from the store's live rollouts as from the
// whole state (cold-start equivalence).
//
// What the suite cannot do through store.Store — reopen a database, run
// raw SQL to check the schema's constraints — it asks of the store through
// Internals, which a backend implements in an export_test.go.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// Internals is what the suite needs of a store beyond store.Store. The
// stores that Run's open function returns must implement it (in an
// export_test.go of the backend's package, so it exists only in tests).
type Internals interface {
	// Reopen opens the store's database again, as Open would (running the
	// migrations again).
	Reopen(ctx context.Context) (store.Store, error)
	// AppliedMigrations lists the versions recorded in schema_migrations,
	// in order.
	AppliedMigrations(ctx context.Context) ([]int, error)
	// EmbeddedMigrations is the number of migrations the backend embeds.
	EmbeddedMigrations() int
	// SetRolloutStateRaw, SetWavePhaseRaw and SetHostStateRaw write a
	// state with SQL, bypassing every check in Go, so that the suite can
	// see the schema's CHECK constraints at work.
	SetRolloutStateRaw(ctx context.Context, rolloutID, state string) error
	SetWavePhaseRaw(ctx context.Context, rolloutID, phase string) error
	SetHostStateRaw(ctx context.Context, rolloutID, hostname, state string) error
	// CountRows counts the rows of a table.
	CountRows(ctx context.Context, table string) (int64, error)
	// ExecRaw runs a statement that must change one row, as no writer of
	// the store would (the suite loses a write with it, as a crash of an
	// asynchronous commit or a restore from a backup would).
	ExecRaw(ctx context.Context, query string, args ...any) error
}

// Run runs the conformance suite. open returns a fresh, empty store and
// registers its own cleanup; it is called once per subtest, and subtests
// run in parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"Migrations", testMigrations},
		{"TickMatchesApply", testTickMatchesApply},
		{"TickDecideErrorWritesNothing", testTickDecideError},
		{"TickApplyErrorWritesNothing", testTickApplyError},
		{"TickFencing", testTickFencing},
		{"TicksSerialize", testTicksSerialize},
		{"Watch", testWatch},
		{"TickNeverReadsTheFuture", testTickClock},
		{"Leases", testLeases},
		{"LeaseAcquireRace", testLeaseAcquireRace},
		{"LeaseOutlivesLongTick", testLeaseOutlivesLongTick},
		{"LeaseTakeoverWaitsForTick", testTakeoverWaitsForTick},
		{"WebSessions", testWebSessions},
		{"WebLoginRace", testWebLoginRace},
		{"RecordStatus", testRecordStatus},
		{"RecordStatusesBatched", testRecordStatusesBatched},
		{"TouchHosts", testTouchHosts},
		{"StatusSaid", testStatusSaid},
		{"Releases", testReleases},
		{"StagedReleaseBodies", testStagedBodies},
		{"ReleaseLog", testReleaseLog},
		{"Manifests", testManifests},
		{"Intents", testIntents},
		{"Events", testEvents},
		{"Prune", testPrune},
		{"PrunedEvents", testPrunedEvents},
		{"NotificationCursors", testNotificationCursors},
		{"NotificationCursorRace", testNotificationCursorRace},
		{"LiveRolloutsAndAssignments", testLiveAndAssignments},
		{"HostPages", testHostPages},
		{"HostPagesWithFleet", HostPagesWithFleet},
		{"RolloutPages", testRolloutPages},
		{"RolloutView", testRolloutView},
		{"StateConstraints", testStateConstraints},
		{"TickManyHosts", testTickManyHosts},
		{"Analysis", testAnalysis},
		{"Forecasts", testForecasts},
		{"ActivationTimes", testActivationTimes},
		{"KeptEqualsColdLoad", testKeptEqualsColdLoad},
		{"DeferredHostRows", testDeferredHostRows},
		{"PruneHosts", testPruneHosts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open(t))
		})
	}
}

// t0 is when every test starts.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func internals(t *testing.T, s store.Store) Internals {
	t.Helper()
	in, ok := s.(Internals)
	if !ok {
		t.Fatalf("the %s store (%T) does not implement storetest.Internals; implement it in the backend's export_test.go", s.Backend(), s)
	}
	return in
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr fails unless err wraps want.
func wantErr(t testing.TB, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// cmpOpts compare store values: times by instant, nil and empty alike.
var cmpOpts = cmp.Options{cmpopts.EquateEmpty()}

func diff(t testing.TB, what string, got, want any) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return // the common case, without cmp's cost on 10,000-host values
	}
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Fatalf("%s (-want +got):\n%s", what, d)
	}
}

// ---- a driver of ticks ----

// sim drives a store tick by tick, with agents that report through the
// store's observation methods.
type sim struct {
	t       *testing.T
	s       store.Store
	ctx     context.Context
	lease   store.Lease
	kept    *kept.Keeper // what the replica keeps between its ticks
	now     time.Time
	tun     rc.Tunables
	online  map[string]bool
	failing map[string]bool // agents whose activation fails
	status  map[string]store.HostStatus
	intents int
	// model is every rollout written, as reconciler.Apply keeps them.
	model []rc.Rollout
}

func newSim(t *testing.T, s store.Store) *sim {
	m := &sim{t: t, s: s, ctx: t.Context(), kept: &kept.Keeper{}, now: t0, online: map[string]bool{}, failing: map[string]bool{},
		status: map[string]store.HostStatus{}}
	l, err := s.AcquireLease(m.ctx, store.TickLease, "replica-a", 1000*time.Hour, t0)
	must(t, err)
	m.lease = l
	return m
}

// release publishes the fleet at ref (signed now) on its channels (the
// named ones when given).
func (m *sim) release(f *proto.FleetResolved, ref string, channels ...string) []store.Release {
	m.t.Helper()
	rs := Releases(m.t, f, ref, m.now, channels...)
	for _, r := range rs {
		must(m.t, m.s.PutRelease(m.ctx, r))
	}
	return rs
}

// checkIn makes hosts report a status (running their v0 closure unless
// they already run something) and check in now. Hosts not online are
// seen an hour ago, and count as offline.
func (m *sim) checkIn(online bool, hosts ...string) {
	m.t.Helper()
	seen := map[string]time.Time{}
	for _, h := range hosts {
		st, ok := m.status[h]
		if !ok {
			st = store.HostStatus{Current: fleetkit.Closure(h, "v0"), Booted: fleetkit.Closure(h, "v0"), Probes: rc.ProbeSummary{Total: 1}}
			m.status[h] = st
			changed, err := m.s.RecordStatus(m.ctx, h, st)
			must(m.t, err)
			if !changed {
				m.t.Fatalf("the first status of %s was not recorded", h)
			}
		}
		m.online[h] = online
		seen[h] = m.now
		if !online {
			seen[h] = m.now.Add(-time.Hour)
		}
	}
	m.checkInAt(seen)
}

// touch makes the online hosts check in now.
func (m *sim) touch() {
	m.t.Helper()
	seen := map[string]time.Time{}
	for h, on := range m.online {
		if on {
			seen[h] = m.now
		}
	}
	m.checkInAt(seen)
}

// checkInAt records check-ins of hosts at the given times, each carrying the
// status the host has (an agent echoing a trusted status tag: only its
// time and the status's digest are written).
func (m *sim) checkInAt(times map[string]time.Time) {
	m.t.Helper()
	seen := make(map[string]store.Seen, len(times))
	for h, at := range times {
		seen[h] = store.Seen{At: at, Said: store.StatusDigest(m.status[h])}
	}
	if _, err := m.s.TouchHosts(m.ctx, seen); err != nil {
		m.t.Fatal(err)
	}
}

func (m *sim) advance(d time.Duration) {
	m.now = m.now.Add(d)
	m.touch()
}

// intent files an operator intent now.
func (m *sim) intent(rollout, kind string) string {
	m.t.Helper()
	m.intents++
	id := fmt.Sprintf("intent-%03d", m.intents)
	must(m.t, m.s.AddIntent(m.ctx, rc.Intent{ID: id, RolloutID: rollout, Kind: kind, Actor: "alice", At: m.now}))
	return id
}

var errPeek = errors.New("storetest: peek only")

// peek returns the Input a tick would load now, writing nothing.
func (m *sim) peek() rc.Input {
	m.t.Helper()
	var in rc.Input
	_, err := m.s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun}, func(i rc.Input) (rc.Output, error) {
		in = i
		return rc.Output{}, errPeek
	})
	wantErr(m.t, err, errPeek, "peek")
	return in
}

// tickWith runs a tick at now with decide, then checks it (checkApplied).
func (m *sim) tickWith(decide func(rc.Input) (rc.Output, error)) (rc.Input, rc.Output) {
	m.t.Helper()
	return m.tickClock(store.At(m.now), decide)
}

// tickClock runs a tick whose clock is clock (it must read m.now), then
// checks it.
func (m *sim) tickClock(clock func() time.Time, decide func(rc.Input) (rc.Output, error)) (rc.Input, rc.Output) {
	m.t.Helper()
	var in rc.Input
	out, err := m.s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: clock, Tunables: m.tun}, func(i rc.Input) (rc.Output, error) {
		in = i
		return decide(i)
	})
	must(m.t, err)
	m.checkApplied(in, out)
	return in, out
}

// tick runs a real reconcile tick, checks it, and lets the agents act on
// its intents.
func (m *sim) tick() rc.Output {
	m.t.Helper()
	_, out := m.tickWith(func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil })
	m.agents(out)
	return out
}

// checkApplied checks a tick against the model: every rollout ever
// written, kept by applying each tick's output with reconciler.Apply.
//
//  1. What the store holds — the Input it loads now, plus the rollouts it
//     no longer loads, read with Rollout — equals Apply(model, out).
//  2. The reconciler decides the same from the rollouts the store loads
//     (the live ones) as from every rollout: cold-start equivalence.
func (m *sim) checkApplied(in rc.Input, out rc.Output) {
	m.t.Helper()
	full := in
	full.Rollouts = m.model
	want := rc.Apply(full, out)
	m.model = want.Rollouts
	live := m.peek()
	all := live
	all.Rollouts = slices.Clone(live.Rollouts)
	loaded := map[string]bool{}
	for _, r := range live.Rollouts {
		loaded[r.ID] = true
	}
	for _, r := range want.Rollouts {
		if !loaded[r.ID] {
			all.Rollouts = append(all.Rollouts, m.rollout(r.ID))
		}
	}
	diff(m.t, fmt.Sprintf("store after the tick at %s vs reconciler.Apply", m.now.Format(time.RFC3339)), normalize(all), normalize(want))
	whole := live
	whole.Rollouts = m.model
	diff(m.t, "the reconciler's decision from the live rollouts vs from every rollout", rc.Reconcile(live), rc.Reconcile(whole))
}

// resync reloads the model from the store, after writes outside ticks.
// While a rollout still owes the rows of its Pending hosts (a tick that
// opened it could not write them, store/owed.go), the store shows it with
// only the hosts it moved, and the leader's next tick writes the rest
// before it loads: the model keeps the hosts it has for such a rollout
// (nothing outside a tick changes a rollout's hosts).
func (m *sim) resync() {
	m.t.Helper()
	list, err := m.s.Rollouts(m.ctx)
	must(m.t, err)
	owed, err := m.s.(Internals).CountRows(m.ctx, "rollout_hosts_owed")
	must(m.t, err)
	had := map[string][]rc.RolloutHost{}
	for _, r := range m.model {
		had[r.ID] = r.Hosts
	}
	m.model = nil
	for _, r := range list {
		ro := m.rollout(r.ID)
		if hosts, ok := had[r.ID]; ok && owed > 0 && len(hosts) > len(ro.Hosts) {
			ro.Hosts = hosts
		}
		m.model = append(m.model, ro)
	}
}

// normalize orders an Input's slices the way the store loads them.
func normalize(in rc.Input) rc.Input {
	in.Rollouts = slices.Clone(in.Rollouts)
	slices.SortFunc(in.Rollouts, func(a, b rc.Rollout) int {
		if c := a.OpenedAt.Compare(b.OpenedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	for i := range in.Rollouts {
		hs := slices.Clone(in.Rollouts[i].Hosts)
		slices.SortFunc(hs, func(a, b rc.RolloutHost) int { return strings.Compare(a.Hostname, b.Hostname) })
		in.Rollouts[i].Hosts = hs
	}
	// Measurements are observations the tick loads for the current waves
	// of running rollouts, not state the tick writes: testAnalysis checks
	// them.
	in.Measurements = nil
	in.Intents = slices.Clone(in.Intents)
	slices.SortFunc(in.Intents, func(a, b rc.Intent) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	in.Channels = slices.Clone(in.Channels)
	slices.SortFunc(in.Channels, func(a, b rc.Channel) int { return strings.Compare(a.Name, b.Name) })
	return in
}

// agents act on a tick's intents: a dispatched host switches and
// confirms (its full status, with RecordStatus), or reports a failure
// (its activation only, with RecordActivation); a host sent back returns
// to its previous closure.
func (m *sim) agents(out rc.Output) {
	m.t.Helper()
	for _, it := range out.Actions {
		st := m.status[it.Host]
		act := rc.Activation{RolloutID: it.RolloutID, Closure: it.Target, Outcome: rc.OutcomeConfirmed, At: m.now}
		if it.Kind == rc.ActionDispatch && m.failing[it.Host] {
			act.Outcome, act.Detail = rc.OutcomeFailed, "switch-to-configuration failed"
			st.Activation = &act
			m.status[it.Host] = st
			must(m.t, m.s.RecordActivation(m.ctx, it.Host, act))
			continue
		}
		st.Current, st.Booted, st.Activation = it.Target, it.Target, &act
		m.status[it.Host] = st
		changed, err := m.s.RecordStatus(m.ctx, it.Host, st)
		must(m.t, err)
		if !changed {
			m.t.Fatalf("a new status of %s was not recorded", it.Host)
		}
	}
}

// rollout reads one rollout.
func (m *sim) rollout(id string) rc.Rollout {
	m.t.Helper()
	r, err := m.s.Rollout(m.ctx, id)
	must(m.t, err)
	return r
}

// state returns a rollout's state, "" when it does not exist.
func (m *sim) state(id string) rc.RolloutState {
	m.t.Helper()
	r, err := m.s.Rollout(m.ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return ""
	}
	must(m.t, err)
	return r.State
}

func hostOf(r rc.Rollout, name string) rc.RolloutHost {
	for _, h := range r.Hosts {
		if h.Hostname == name {
			return h
		}
	}
	return rc.RolloutHost{}
}

// ---- a snapshot of everything a store shows ----

type snapshot struct {
	Input     rc.Input
	Rollouts  []rc.Rollout
	Manifests map[string]store.Manifest
	Events    []proto.Event
	Hosts     []store.HostRecord
	Releases  []store.Release
	Intents   map[string]store.IntentRecord
	Watermark store.Watermark
}

func (m *sim) snapshot(intentIDs ...string) snapshot {
	m.t.Helper()
	var sn snapshot
	sn.Input = normalize(m.peek())
	list, err := m.s.Rollouts(m.ctx)
	must(m.t, err)
	sn.Manifests = map[string]store.Manifest{}
	for _, r := range list {
		sn.Rollouts = append(sn.Rollouts, m.rollout(r.ID))
		mf, err := m.s.Manifest(m.ctx, r.ID)
		must(m.t, err)
		sn.Manifests[r.ID] = mf
	}
	sn.Events, err = m.s.Events(m.ctx, proto.EventQuery{Limit: 10000})
	must(m.t, err)
	sn.Hosts, err = m.s.Hosts(m.ctx)
	must(m.t, err)
	sn.Releases, err = m.s.Releases(m.ctx)
	must(m.t, err)
	sn.Intents = map[string]store.IntentRecord{}
	for _, id := range intentIDs {
		rec, err := m.s.Intent(m.ctx, id)
		must(m.t, err)
		sn.Intents[id] = rec
	}
	sn.Watermark, err = m.s.Watermark(m.ctx)
	must(m.t, err)
	return sn
}

// ---- crafted rollouts ----

// crafted returns a complete rollout record in a given state, for ticks
// whose decide writes chosen records.
func crafted(channel, ref string, state rc.RolloutState, opened, updated time.Time, manifestHash string, hosts ...rc.RolloutHost) rc.Rollout {
	two := 2
	return rc.Rollout{ID: proto.RolloutID(channel, ref), Channel: channel, Ref: ref, State: state, Wave: 0,
		WavePhase: rc.PhaseSoaking, OpenedAt: opened, WaveStartedAt: opened, UpdatedAt: updated, ProgressAt: updated,
		Reason: rc.Reason{Code: "crafted", Message: "written by the conformance suite"}, ManifestHash: manifestHash,
		Waves: []rc.WaveSpec{{SoakMinutes: 0}}, HealthGate: proto.HealthGate{MaxFailures: &two},
		OnHealthFailure: proto.OnHealthFailureHalt, ComplianceMode: proto.ComplianceDisabled,
		Frameworks: []string{"nis2"}, Edges: []rc.Edge{},
		Budgets: []proto.RolloutBudget{{Hosts: []string{"a", "b"}, MaxInFlight: &two, Selector: proto.Selector{All: true}}},
		Hosts:   hosts}
}

func craftedHost(name string, state rc.HostState, since time.Time) rc.RolloutHost {
	return rc.RolloutHost{Hostname: name, Wave: 0, Target: fleetkit.Closure(name, "v1"), State: state, Since: since,
		Previous: fleetkit.Closure(name, "v0"), Reason: rc.Reason{Code: "crafted"}, Budgets: []int{0}}
}

// open writes new rollouts in one tick.
func (m *sim) open(rs ...rc.Rollout) {
	m.t.Helper()
	m.tickWith(func(rc.Input) (rc.Output, error) {
		var out rc.Output
		for _, r := range rs {
			out.Rollouts = append(out.Rollouts, rc.RolloutUpdate{New: true, Rollout: r})
		}
		return out, nil
	})
}

// touch records check-ins at the given times that carried no status
// digest (store.SeenAt).
func touch(t testing.TB, s store.Store, ctx context.Context, times map[string]time.Time) {
	t.Helper()
	if _, err := s.TouchHosts(ctx, store.SeenAt(times)); err != nil {
		t.Fatal(err)
	}
}
