// Package fleetrepo makes fleet git repositories the way CI and operators
// do: sign a release into releases/ (package release), commit it, and
// promote it by moving refs/heads/channels/<channel>. Tests, the demo and
// the end-to-end test use it.
package fleetrepo

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// Repo is a fleet repository with a worktree and the CI signing key.
type Repo struct {
	Dir string
	Key *trust.PrivateKey
	git *git.Repository
}

// Init creates a repository in dir with a fresh ed25519 CI key.
func Init(dir string) (*Repo, error) {
	g, err := git.PlainInit(dir, false)
	if err != nil {
		return nil, err
	}
	key, err := trust.GenerateKey(proto.AlgorithmEd25519)
	if err != nil {
		return nil, err
	}
	return &Repo{Dir: dir, Key: key, git: g}, nil
}

// Open opens the repository in dir, to sign with key: another process
// than Init's (a benchmark's CI) working on the same repository.
func Open(dir string, key *trust.PrivateKey) (*Repo, error) {
	g, err := git.PlainOpen(dir)
	if err != nil {
		return nil, err
	}
	return &Repo{Dir: dir, Key: key, git: g}, nil
}

// TrustJSON is a trust.json pinning the CI key.
func (r *Repo) TrustJSON() []byte {
	k := r.Key.Public().Proto()
	b, _ := json.MarshalIndent(proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: &k}, CacheKeys: []string{}}, "", "  ")
	return b
}

// Release signs an unsigned fleet as CI would at ciCommit and now, writes
// it into releases/, commits it and returns the commit.
func (r *Repo) Release(unsigned []byte, ciCommit string, now time.Time) (plumbing.Hash, error) {
	b, err := release.Sign(unsigned, release.Options{Signer: r.Key, Commit: ciCommit, Now: now})
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if err := release.WriteDir(filepath.Join(r.Dir, "releases"), b); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.Commit("release "+ciCommit, now)
}

// Commit commits the whole worktree.
func (r *Repo) Commit(msg string, now time.Time) (plumbing.Hash, error) {
	wt, err := r.git.Worktree()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return plumbing.ZeroHash, err
	}
	sig := &object.Signature{Name: "nixfleet CI", Email: "ci@nixfleet.invalid", When: now}
	return wt.Commit(msg, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true})
}

// Promote points refs/heads/channels/<channel> at a commit.
func (r *Repo) Promote(channel string, commit plumbing.Hash) error {
	ref := plumbing.NewHashReference(plumbing.ReferenceName("refs/heads/channels/"+channel), commit)
	return r.git.Storer.SetReference(ref)
}

// Ref returns the commit a channel ref points at.
func (r *Repo) Ref(channel string) (plumbing.Hash, error) {
	ref, err := r.git.Reference(plumbing.ReferenceName("refs/heads/channels/"+channel), true)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return ref.Hash(), nil
}

// WriteFile writes a file into the worktree (for tampering in tests).
func (r *Repo) WriteFile(rel string, data []byte) error {
	p := filepath.Join(r.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// Host is a simulated host of a test fleet.
type Host struct {
	Name    string
	Channel string
	Wave    int
	Tags    []string
	Key     ed25519.PrivateKey
}

// NewHost makes a host with a fresh SSH-style ed25519 key.
func NewHost(name, channel string, wave int, tags ...string) Host {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	return Host{Name: name, Channel: channel, Wave: wave, Tags: tags, Key: key}
}

// SSHPubkey is the host's key as fleet.resolved holds it.
func (h Host) SSHPubkey() string { return trust.SSHEd25519Line(h.Key.Public().(ed25519.PublicKey)) }

// Closure is a valid store path basename for a host at a version.
func Closure(host, version string) string {
	const alphabet = "0123456789abcdfghijklmnpqrsvwxyz"
	sum := []byte(fmt.Sprintf("%-32s", host+"/"+version))
	h := make([]byte, 32)
	acc := uint32(2166136261)
	for i := range h {
		acc = (acc ^ uint32(sum[i%len(sum)])) * 16777619
		h[i] = alphabet[acc%32]
	}
	return string(h) + "-nixos-system-" + host + "-" + version
}

// Spec describes a small test fleet: channels with their wave soak
// minutes, hosts, and optional budgets and policies.
type Spec struct {
	// Channels maps a channel to its waves' soak minutes. A channel with
	// none is rolled out all at once: its policy has strategy
	// "all-at-once" and no waves, waves.<channel> is an empty list, and
	// its hosts are all in wave 0 (rfcs/0001 §4.1).
	Channels map[string][]int
	Hosts    []Host
	// Budgets are added as they are.
	Budgets []proto.DisruptionBudget
	// OnHealthFailure for every channel's policy (default halt).
	OnHealthFailure string
	// ChannelEdges order channels.
	ChannelEdges []proto.ChannelEdge
	// FreshnessMinutes is every channel's window (default 1440).
	FreshnessMinutes int
	// Windows are every channel's maintenance windows, and Freezes the
	// fleet's (rfcs/0001 §2.2).
	Windows []proto.Window
	Freezes []proto.Freeze
	// Approvals gives waves an approval gate: Approvals[channel][wave]
	// (0001 §2.2; none where absent).
	Approvals map[string]map[int]proto.Approval
	// Analysis is every channel's canary analyses (0001 §2.3).
	Analysis []proto.Analysis
	// Reboot is every channel's reboot step (0001 §2.4).
	Reboot *proto.Reboot
	// Closures, when set, gives the closure of a host at a version
	// (Closures[version][host]) instead of Closure(host, version): real
	// store paths, for tests that run Nix.
	Closures map[string]map[string]string
}

// Fleet builds the unsigned fleet.resolved of a spec at a version: every
// host's closure is Closure(name, version), unless Closures names one.
func (s Spec) Fleet(version string) ([]byte, error) {
	f := proto.FleetResolved{SchemaVersion: 1, Hosts: map[string]proto.Host{}, Channels: map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{}, Waves: map[string][]proto.Wave{},
		Edges: []proto.Edge{}, ChannelEdges: append([]proto.ChannelEdge{}, s.ChannelEdges...),
		DisruptionBudgets: append([]proto.DisruptionBudget{}, s.Budgets...)}
	onFail := s.OnHealthFailure
	if onFail == "" {
		onFail = proto.OnHealthFailureHalt
	}
	window := s.FreshnessMinutes
	if window == 0 {
		window = 1440
	}
	for ch, soaks := range s.Channels {
		f.Channels[ch] = proto.Channel{RolloutPolicy: ch, FreshnessWindow: window, SigningIntervalMinutes: window / 2,
			ReconcileIntervalMinutes: 1, Compliance: proto.Compliance{Frameworks: []string{}, Mode: proto.ComplianceDisabled}}
		p := proto.RolloutPolicy{Strategy: "staged", Waves: []proto.PolicyWave{}, OnHealthFailure: onFail, Windows: s.Windows,
			HealthGate: proto.HealthGate{Analysis: s.Analysis}, Reboot: s.Reboot}
		f.Waves[ch] = []proto.Wave{}
		if len(soaks) == 0 {
			p.Strategy = "all-at-once"
		}
		for i, soak := range soaks {
			var gate *proto.Approval
			if a, ok := s.Approvals[ch][i]; ok {
				gate = &a
			}
			p.Waves = append(p.Waves, proto.PolicyWave{Selector: proto.Selector{All: true}, SoakMinutes: soak, Approval: gate})
			f.Waves[ch] = append(f.Waves[ch], proto.Wave{Hosts: []string{}, SoakMinutes: soak, Approval: gate})
		}
		f.RolloutPolicies[ch] = p
	}
	for _, h := range s.Hosts {
		c, k := Closure(h.Name, version), h.SSHPubkey()
		if real, ok := s.Closures[version][h.Name]; ok {
			c = real
		}
		f.Hosts[h.Name] = proto.Host{System: "x86_64-linux", Tags: append([]string{}, h.Tags...), Channel: h.Channel, ClosureHash: &c, Pubkey: &k}
		w := f.Waves[h.Channel]
		if soaks, ok := s.Channels[h.Channel]; ok && len(soaks) == 0 && h.Wave == 0 {
			continue // all at once: no wave lists it
		}
		if h.Wave >= len(w) {
			return nil, fmt.Errorf("fleetrepo: host %s: channel %s has %d waves", h.Name, h.Channel, len(w))
		}
		w[h.Wave].Hosts = append(w[h.Wave].Hosts, h.Name)
	}
	f.Freezes = s.Freezes
	v := 1
	f.Meta = proto.Meta{SchemaVersion: &v}
	return json.Marshal(f)
}
