package demo

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// The demo fleet's channels, in rollout order: prod follows staging.
const (
	stagingChannel = "staging"
	prodChannel    = "prod"
)

// Bounds of --hosts.
const (
	MinHosts     = 4
	MaxHosts     = 500
	DefaultHosts = 20
)

// fleetHost is one simulated machine of the demo fleet.
type fleetHost struct {
	name    string
	channel string
	tags    []string
	wave    int
	key     ed25519.PrivateKey
}

// fleetWave is one wave of a channel's policy: a name for people, the
// selector CI resolves, and the hosts it resolved to.
type fleetWave struct {
	name     string
	selector proto.Selector
	hosts    []string
}

// fleetChannel is a channel of the demo fleet with its policy.
type fleetChannel struct {
	name            string
	waves           []fleetWave
	onHealthFailure string
	// reboot lets the control plane reboot the channel's staged hosts
	// (rfcs/0003 rule 17).
	reboot *proto.Reboot
	canary string
	hosts  []string
}

// fleet is the fleet the demo signs: two channels (prod follows
// staging), a canary wave on each, database hosts that go before the web
// hosts of their region, and disruption budgets.
//
// With n hosts: staging gets max(2, n/5) of them (one database, web
// servers, the first web server is the canary); prod the rest. From 8
// prod hosts on, prod has two regions (eu, us) with a database each, and
// three waves: its canary, the eu region, everything else; below that,
// one database and two waves: canary, the rest. The budget on prod comes
// first in the budgets. Every wave soaks 0 minutes: soak is counted in
// whole minutes, and the health gate is judged anyway on the first
// check-in after a host confirms (rfcs/0003 rule 8).
type fleet struct {
	hosts    []*fleetHost // by channel, then as created
	byName   map[string]*fleetHost
	channels []*fleetChannel // staging, prod
	edges    []proto.Edge
	budgets  []proto.DisruptionBudget
	// prodLimit is how many prod hosts may be in flight at once.
	prodLimit int
}

func newFleet(n int) (*fleet, error) {
	f := &fleet{byName: map[string]*fleetHost{}}
	nStaging := max(2, n/5)
	nProd := n - nStaging
	width := 2
	if n >= 100 {
		width = 3
	}
	add := func(name, channel string, tags ...string) (*fleetHost, error) {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		h := &fleetHost{name: name, channel: channel, tags: tags, key: key}
		f.hosts = append(f.hosts, h)
		f.byName[name] = h
		return h, nil
	}
	num := func(prefix string, i int) string { return fmt.Sprintf("%s-%0*d", prefix, width, i) }
	edge := func(db, web string) {
		f.edges = append(f.edges, proto.Edge{Gates: db, Gated: web, Reason: "the database migrates before the web servers that use it"})
	}

	// staging: a database and web servers; the first web server is the
	// canary.
	if _, err := add("stg-db-01", stagingChannel, "db"); err != nil {
		return nil, err
	}
	for i := 1; i < nStaging; i++ {
		tags := []string{"web"}
		if i == 1 {
			tags = append(tags, "canary")
		}
		h, err := add(num("stg-web", i), stagingChannel, tags...)
		if err != nil {
			return nil, err
		}
		if i > 1 {
			edge("stg-db-01", h.name)
		}
	}

	// prod: one database per region, web servers alternating between the
	// regions; the first web server is the canary.
	regions := []string{"eu"}
	if nProd >= 8 {
		regions = append(regions, "us")
	}
	dbs := map[string]string{}
	for _, r := range regions {
		name := "prod-db-01"
		if len(regions) > 1 {
			name = "prod-db-" + r
		}
		if _, err := add(name, prodChannel, "db", r); err != nil {
			return nil, err
		}
		dbs[r] = name
	}
	for i := 1; i <= nProd-len(regions); i++ {
		r := regions[(i-1)%len(regions)]
		tags := []string{"web", r}
		if i == 1 {
			tags = append(tags, "canary")
		}
		h, err := add(num("prod-web", i), prodChannel, tags...)
		if err != nil {
			return nil, err
		}
		if i > 1 {
			edge(dbs[r], h.name)
		}
	}

	canaryWave := fleetWave{name: "canary", selector: proto.Selector{Tags: []string{"canary"}}}
	rest := fleetWave{name: "rest", selector: proto.Selector{All: true}}
	prodWaves := []fleetWave{canaryWave, rest}
	if len(regions) > 1 {
		prodWaves = []fleetWave{canaryWave, {name: "eu", selector: proto.Selector{TagsAny: []string{"eu"}}}, rest}
	}
	f.channels = []*fleetChannel{
		{name: stagingChannel, waves: []fleetWave{canaryWave, rest}, onHealthFailure: proto.OnHealthFailureRollbackAndHalt,
			reboot: &proto.Reboot{Allowed: true, BootTimeoutMinutes: 2}},
		{name: prodChannel, waves: prodWaves, onHealthFailure: proto.OnHealthFailureHalt},
	}
	for _, c := range f.channels {
		for _, h := range f.hosts {
			if h.channel != c.name {
				continue
			}
			c.hosts = append(c.hosts, h.name)
			if slices.Contains(h.tags, "canary") {
				c.canary = h.name
			}
			h.wave = -1
			for i := range c.waves {
				if c.waves[i].selector.Matches(h.name, proto.Host{Channel: h.channel, Tags: h.tags}) {
					h.wave = i
					c.waves[i].hosts = append(c.waves[i].hosts, h.name)
					break
				}
			}
			if h.wave < 0 {
				return nil, fmt.Errorf("demo fleet: no wave of %s selects %s", c.name, h.name)
			}
		}
	}

	// Budgets: at most 20% of prod in flight (one host when that rounds
	// down to none), half of staging, one database at a time fleet-wide.
	prodSel, stagingSel := prodChannel, stagingChannel
	f.prodLimit = nProd * 20 / 100
	if f.prodLimit >= 1 {
		f.budgets = append(f.budgets, proto.DisruptionBudget{Name: "prod", Selector: proto.Selector{Channel: &prodSel}, MaxInFlightPct: ptr(20)})
	} else {
		f.prodLimit = 1
		f.budgets = append(f.budgets, proto.DisruptionBudget{Name: "prod", Selector: proto.Selector{Channel: &prodSel}, MaxInFlight: ptr(1)})
	}
	f.budgets = append(f.budgets,
		proto.DisruptionBudget{Name: "staging", Selector: proto.Selector{Channel: &stagingSel}, MaxInFlightPct: ptr(50)},
		proto.DisruptionBudget{Name: "databases", Selector: proto.Selector{Tags: []string{"db"}}, MaxInFlight: ptr(1)})
	return f, nil
}

func ptr[T any](v T) *T { return &v }

func (f *fleet) channel(name string) *fleetChannel {
	for _, c := range f.channels {
		if c.name == name {
			return c
		}
	}
	return nil
}

// closure is a host's system closure at a release version.
func (f *fleet) closure(host, version string) string { return fleetrepo.Closure(host, version) }

// ciCommit is the source commit CI builds a version from: a stable hex id,
// so rollout ids are the same from one demo to the next.
func commitOf(version string) string {
	sum := sha256.Sum256([]byte("nixfleet demo release " + version))
	return hex.EncodeToString(sum[:6])
}

// unsigned is the fleet.resolved CI would evaluate at a version: every
// host's closure changes with the version.
func (f *fleet) unsigned(version string) ([]byte, error) {
	fr := proto.FleetResolved{
		SchemaVersion:   proto.SchemaVersion,
		Hosts:           map[string]proto.Host{},
		Channels:        map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{},
		Waves:           map[string][]proto.Wave{},
		Edges:           slices.Clone(f.edges),
		ChannelEdges: []proto.ChannelEdge{{Gates: stagingChannel, Gated: prodChannel,
			Reason: "a release reaches prod only after staging took it"}},
		DisruptionBudgets: slices.Clone(f.budgets),
	}
	for _, h := range f.hosts {
		c := f.closure(h.name, version)
		k := trust.SSHEd25519Line(h.key.Public().(ed25519.PublicKey))
		fr.Hosts[h.name] = proto.Host{System: "x86_64-linux", Tags: slices.Clone(h.tags), Channel: h.channel, ClosureHash: &c, Pubkey: &k}
	}
	for _, c := range f.channels {
		fr.Channels[c.name] = proto.Channel{RolloutPolicy: c.name, FreshnessWindow: 1440, SigningIntervalMinutes: 60,
			ReconcileIntervalMinutes: 1, Compliance: proto.Compliance{Frameworks: []string{}, Mode: proto.ComplianceDisabled}}
		p := proto.RolloutPolicy{Strategy: "canary", OnHealthFailure: c.onHealthFailure, Reboot: c.reboot,
			HealthGate: proto.HealthGate{MaxFailures: ptr(0), SystemdFailedUnits: &proto.SystemdFailedUnits{Max: 0},
				// Each wave is judged by its services too: one measurement
				// of the worst error ratio of its hosts, a second after
				// its first host runs the release (rfcs/0001 §2.3). A query
				// that fails (a machine too busy to answer in time) is
				// tried again, twice.
				Analysis: []proto.Analysis{{Name: analysisName, Query: analysisQuery, SuccessCondition: "result < 0.02",
					Interval: "1s", Count: 1, InconclusiveLimit: 2}}}}
		for _, w := range c.waves {
			p.Waves = append(p.Waves, proto.PolicyWave{Name: w.name, Selector: w.selector, SoakMinutes: 0})
			fr.Waves[c.name] = append(fr.Waves[c.name], proto.Wave{Name: w.name, Hosts: slices.Clone(w.hosts), SoakMinutes: 0})
		}
		fr.RolloutPolicies[c.name] = p
	}
	v := proto.SchemaVersion
	fr.Meta = proto.Meta{SchemaVersion: &v}
	return json.Marshal(fr)
}

// hostNames lists the hosts' names.
func (f *fleet) hostNames() []string {
	out := make([]string, len(f.hosts))
	for i, h := range f.hosts {
		out[i] = h.name
	}
	return out
}
