package reconciler_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// t0 is the start of every scenario.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ---- fleets ----

// fleetBuilder makes small, valid fleets.
type fleetBuilder struct {
	t       testing.TB
	f       *proto.FleetResolved
	version string
}

func newFleet(t testing.TB) *fleetBuilder {
	return &fleetBuilder{t: t, version: "v1", f: &proto.FleetResolved{
		SchemaVersion: 1, Hosts: map[string]proto.Host{}, Channels: map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{}, Waves: map[string][]proto.Wave{},
		Edges: []proto.Edge{}, ChannelEdges: []proto.ChannelEdge{}, DisruptionBudgets: []proto.DisruptionBudget{},
	}}
}

// channel adds a channel whose policy has one wave per soak time given
// (minutes), halting on the first failure.
func (b *fleetBuilder) channel(name string, soaks ...int) *fleetBuilder {
	b.f.Channels[name] = proto.Channel{RolloutPolicy: name, FreshnessWindow: 1440, SigningIntervalMinutes: 60,
		ReconcileIntervalMinutes: 5, Compliance: proto.Compliance{Frameworks: []string{}, Mode: proto.ComplianceDisabled}}
	p := proto.RolloutPolicy{Strategy: "staged", HealthGate: proto.HealthGate{}, OnHealthFailure: proto.OnHealthFailureHalt}
	waves := []proto.Wave{}
	for _, s := range soaks {
		p.Waves = append(p.Waves, proto.PolicyWave{Selector: proto.Selector{All: true}, SoakMinutes: s})
		waves = append(waves, proto.Wave{Hosts: []string{}, SoakMinutes: s})
	}
	b.f.RolloutPolicies[name] = p
	b.f.Waves[name] = waves
	return b
}

// policy edits a channel's rollout policy.
func (b *fleetBuilder) policy(channel string, edit func(*proto.RolloutPolicy)) *fleetBuilder {
	p := b.f.RolloutPolicies[channel]
	edit(&p)
	b.f.RolloutPolicies[channel] = p
	return b
}

// compliance sets a channel's compliance mode and frameworks.
func (b *fleetBuilder) compliance(channel, mode string, frameworks ...string) *fleetBuilder {
	c := b.f.Channels[channel]
	c.Compliance = proto.Compliance{Mode: mode, Frameworks: append([]string{}, frameworks...)}
	b.f.Channels[channel] = c
	return b
}

// host adds a host to a channel's wave.
func (b *fleetBuilder) host(name, channel string, wave int, tags ...string) *fleetBuilder {
	c := closure(name, b.version)
	b.f.Hosts[name] = proto.Host{System: "x86_64-linux", Tags: append([]string{}, tags...), Channel: channel, ClosureHash: &c}
	w := b.f.Waves[channel]
	w[wave].Hosts = append(w[wave].Hosts, name)
	return b
}

func (b *fleetBuilder) edge(gates, gated string) *fleetBuilder {
	b.f.Edges = append(b.f.Edges, proto.Edge{Gates: gates, Gated: gated})
	return b
}

func (b *fleetBuilder) channelEdge(gates, gated string) *fleetBuilder {
	b.f.ChannelEdges = append(b.f.ChannelEdges, proto.ChannelEdge{Gates: gates, Gated: gated})
	return b
}

// budget adds a disruption budget; 0 leaves a limit unset.
func (b *fleetBuilder) budget(sel proto.Selector, maxInFlight, pct int) *fleetBuilder {
	d := proto.DisruptionBudget{Selector: sel}
	if maxInFlight > 0 {
		d.MaxInFlight = &maxInFlight
	}
	if pct > 0 {
		d.MaxInFlightPct = &pct
	}
	b.f.DisruptionBudgets = append(b.f.DisruptionBudgets, d)
	return b
}

// bump makes every host's closure new, as a new release would.
func (b *fleetBuilder) bump(version string) *fleetBuilder {
	b.version = version
	for name, h := range b.f.Hosts {
		c := closure(name, version)
		h.ClosureHash = &c
		b.f.Hosts[name] = h
	}
	return b
}

// bumpHost gives one host a new closure, as a release that changes only
// that host would.
func (b *fleetBuilder) bumpHost(name, version string) *fleetBuilder {
	h := b.f.Hosts[name]
	c := closure(name, version)
	h.ClosureHash = &c
	b.f.Hosts[name] = h
	return b
}

// build returns a deep copy of the fleet, checked with ValidateFleet.
func (b *fleetBuilder) build() *proto.FleetResolved {
	raw, err := json.Marshal(b.f)
	if err != nil {
		b.t.Fatal(err)
	}
	f, err := proto.DecodeFleetResolved(raw)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := manifest.ValidateFleet(f); err != nil {
		b.t.Fatalf("scenario fleet is invalid: %v", err)
	}
	return f
}

// closure is a valid store path basename for a host and version.
func closure(host, version string) string {
	sum := sha256.Sum256([]byte(host + "/" + version))
	const alphabet = "0123456789abcdfghijklmnpqrsvwxyz"
	h := make([]byte, 32)
	for i := range h {
		h[i] = alphabet[int(sum[i])%32]
	}
	return string(h) + "-nixos-system-" + host + "-" + version
}

func commit(n int) string { return fmt.Sprintf("%07x%033d", n, 0) }

// ---- scenarios ----

// scenario drives the reconciler tick by tick with scripted agents.
type scenario struct {
	t    testing.TB
	in   rc.Input
	last rc.Output
}

func newScenario(t testing.TB) *scenario {
	return &scenario{t: t, in: rc.Input{Now: t0, Hosts: map[string]rc.ObservedHost{},
		Channels: []rc.Channel{}, Rollouts: []rc.Rollout{}, Intents: []rc.Intent{}, Deferrals: []rc.Deferral{},
		Visibility: []rc.Visibility{}}}
}

// release publishes a verified release of the fleet at ref on the given
// channels (all of the fleet's channels when none are named).
func (s *scenario) release(f *proto.FleetResolved, ref string, channels ...string) *scenario {
	f.Meta.CICommit = &ref
	ms, err := manifest.Project(f, "fleet-"+ref)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, m := range ms {
		if len(channels) > 0 && !slices.Contains(channels, m.Channel) {
			continue
		}
		body, err := manifest.Marshal(m)
		if err != nil {
			s.t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		c := rc.Channel{Name: m.Channel, Ref: ref, Fleet: f, Manifest: m, ManifestHash: hex.EncodeToString(sum[:])}
		if i := slices.IndexFunc(s.in.Channels, func(x rc.Channel) bool { return x.Name == m.Channel }); i >= 0 {
			c.LastRolledRef = s.in.Channels[i].LastRolledRef
			s.in.Channels[i] = c
		} else {
			s.in.Channels = append(s.in.Channels, c)
		}
	}
	return s
}

// online registers hosts that check in now, running an older closure.
func (s *scenario) online(hosts ...string) *scenario {
	for _, h := range hosts {
		o := s.in.Hosts[h]
		o.LastSeen = s.in.Now
		if o.Current == "" {
			o.Current, o.Booted = closure(h, "v0"), closure(h, "v0")
		}
		s.in.Hosts[h] = o
	}
	return s
}

// offline makes hosts stop checking in (last seen an hour ago).
func (s *scenario) offline(hosts ...string) *scenario {
	for _, h := range hosts {
		o := s.in.Hosts[h]
		if o.Current == "" {
			o.Current, o.Booted = closure(h, "v0"), closure(h, "v0")
		}
		o.LastSeen = s.in.Now.Add(-time.Hour)
		s.in.Hosts[h] = o
	}
	return s
}

// watching sets when the control plane's current watch began.
func (s *scenario) watching(since time.Time) *scenario {
	s.in.WatchingSince = since
	return s
}

// outage moves time on by d with the control plane down: no check-in is
// recorded meanwhile, and its watch starts again when it is back.
func (s *scenario) outage(d time.Duration) *scenario {
	s.in.Now = s.in.Now.Add(d)
	s.in.WatchingSince = s.in.Now
	return s
}

// tick runs one reconcile and applies its output.
func (s *scenario) tick() *scenario {
	s.last = rc.Reconcile(s.in)
	s.in = rc.Apply(s.in, s.last)
	return s
}

// advance moves time on; online hosts check in at the new time.
func (s *scenario) advance(d time.Duration) *scenario {
	before := s.in.Now
	s.in.Now = s.in.Now.Add(d)
	for h, o := range s.in.Hosts {
		if !o.LastSeen.IsZero() && before.Sub(o.LastSeen) < 5*time.Minute {
			o.LastSeen = s.in.Now
			s.in.Hosts[h] = o
		}
	}
	return s
}

// hostIn returns a host's record in a rollout.
func (s *scenario) hostIn(rollout, host string) rc.RolloutHost {
	for _, r := range s.in.Rollouts {
		if r.ID != rollout {
			continue
		}
		for _, h := range r.Hosts {
			if h.Hostname == host {
				return h
			}
		}
	}
	s.t.Fatalf("no host %s in rollout %s", host, rollout)
	return rc.RolloutHost{}
}

// report makes a host's agent report an outcome for its activation in a
// rollout, at the current time.
func (s *scenario) report(rollout, host, outcome string) *scenario {
	h := s.hostIn(rollout, host)
	o := s.in.Hosts[host]
	target := h.Target
	if h.State == rc.HostRollingBack {
		target = h.Previous
	}
	switch outcome {
	case rc.OutcomeConfirmed:
		o.Current = target
		if h.State != rc.HostDeferred {
			o.Booted = target
		}
	case rc.OutcomeDeferred:
		o.Deferred = true
	}
	o.LastSeen = s.in.Now
	o.Activation = &rc.Activation{RolloutID: rollout, Closure: h.Target, Outcome: outcome, At: s.in.Now}
	s.in.Hosts[host] = o
	return s
}

// confirm: the hosts' agents confirm their switch in the rollout.
func (s *scenario) confirm(rollout string, hosts ...string) *scenario {
	for _, h := range hosts {
		s.report(rollout, h, rc.OutcomeConfirmed)
	}
	return s
}

// reboot: a host boots into the closure it had staged.
func (s *scenario) reboot(rollout, host string) *scenario {
	h := s.hostIn(rollout, host)
	o := s.in.Hosts[host]
	o.Current, o.Booted, o.Deferred, o.LastSeen = h.Target, h.Target, false, s.in.Now
	s.in.Hosts[host] = o
	return s
}

// backOnPrevious: a rolling-back host is seen on its previous closure.
func (s *scenario) backOnPrevious(rollout string, hosts ...string) *scenario {
	for _, host := range hosts {
		h := s.hostIn(rollout, host)
		o := s.in.Hosts[host]
		o.Current, o.Booted, o.LastSeen = h.Previous, h.Previous, s.in.Now
		s.in.Hosts[host] = o
	}
	return s
}

// observe edits a host's observation.
func (s *scenario) observe(host string, edit func(*rc.ObservedHost)) *scenario {
	o := s.in.Hosts[host]
	edit(&o)
	s.in.Hosts[host] = o
	return s
}

// intent files an operator intent.
func (s *scenario) intent(id, rollout, kind, actor string) *scenario {
	s.in.Intents = append(s.in.Intents, rc.Intent{ID: id, RolloutID: rollout, Kind: kind, Actor: actor, At: s.in.Now})
	return s
}

// rollout edits a rollout's record directly.
func (s *scenario) rollout(id string, edit func(*rc.Rollout)) *scenario {
	for i := range s.in.Rollouts {
		if s.in.Rollouts[i].ID == id {
			edit(&s.in.Rollouts[i])
			return s
		}
	}
	s.t.Fatalf("no rollout %s", id)
	return s
}

// state returns a rollout's state.
func (s *scenario) state(id string) rc.RolloutState {
	for _, r := range s.in.Rollouts {
		if r.ID == id {
			return r.State
		}
	}
	return ""
}

// converge runs ticks in which every dispatched host confirms and soaks,
// until no rollout moves (at most 50 ticks of step d).
func (s *scenario) converge(d time.Duration) *scenario {
	for range 50 {
		s.tick()
		if len(s.last.Events) == 0 {
			return s
		}
		for _, it := range s.last.Actions {
			if it.Kind == rc.ActionDispatch {
				s.confirm(it.RolloutID, it.Host)
			} else {
				s.backOnPrevious(it.RolloutID, it.Host)
			}
		}
		s.advance(d)
	}
	s.t.Fatal("the scenario does not settle in 50 ticks")
	return s
}

// rid is a rollout id.
func rid(channel string, n int) string { return proto.RolloutID(channel, commit(n)) }
