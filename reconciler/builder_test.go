package reconciler_test

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// t0 is the start of every scenario.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

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
			o.Current, o.Booted = fleetkit.Closure(h, "v0"), fleetkit.Closure(h, "v0")
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
			o.Current, o.Booted = fleetkit.Closure(h, "v0"), fleetkit.Closure(h, "v0")
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
func rid(channel string, n int) string { return proto.RolloutID(channel, fleetkit.Commit(n)) }
