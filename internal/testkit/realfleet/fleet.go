package realfleet

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/internal/testkit/nixtest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// Fleet is a running fleet: real closures for every version (every host
// runs the first at the start), a signed binary cache holding the others,
// a git fleet repository with a CI key, a real nixfleet-cp over mutual TLS,
// an operator to read and drive it, and the hosts with their agents.
type Fleet struct {
	T   *testing.T
	Dir string
	Bin Binaries
	// Net holds the hosts when set; the control plane and the cache
	// listen on its gateway. Nil: everything on loopback.
	Net      *nixtest.Net
	Spec     fleetrepo.Spec
	Repo     *fleetrepo.Repo
	Cache    *nixtest.Cache
	Closures map[string]map[string]nixtest.Closure // version -> host
	Trust    string                                // the agents' trust.json
	Cert     devcert.Files
	CPURL    string
	CP       *Proc
	// Op is an operator (role operator) of the control plane; OpKey is
	// its OpenSSH private key file, for the nixfleet CLI.
	Op    *apiclient.Client
	OpKey string

	probes string
	hosts  map[string]*nixtest.Host
}

// Options configure New.
type Options struct {
	Bin Binaries
	// Net, when set, holds the hosts.
	Net *nixtest.Net
	// Hosts and the channels' waves (soak minutes), budgets and policy of
	// the fleet (fleetrepo.Spec without Closures).
	Spec fleetrepo.Spec
	// Versions are the closures built for every host; the first is what
	// the hosts run at the start. Default v0, v1.
	Versions []string
	// Change adjusts a host's closure at a version (Host and Version are
	// set by New): Change[version][host].
	Change map[string]map[string]nixtest.ClosureSpec
	// Unsigned[version] lists hosts whose closure at that version is in
	// the cache without signatures.
	Unsigned map[string][]string
	// DB is the control plane's store URL (default SQLite in Dir).
	DB string
	// CPArgs are added to nixfleet-cp serve's flags (they win over the
	// defaults: --poll-interval 500ms --confirm-window 2m).
	CPArgs []string
}

// New builds the closures, fills the cache and starts the control plane;
// it signs nothing (Release does) and starts no agent (StartAgent does).
func New(t *testing.T, o Options) *Fleet {
	t.Helper()
	nixtest.Require(t)
	if len(o.Versions) == 0 {
		o.Versions = []string{"v0", "v1"}
	}
	f := &Fleet{T: t, Dir: t.TempDir(), Bin: o.Bin, Net: o.Net, hosts: map[string]*nixtest.Host{},
		Closures: map[string]map[string]nixtest.Closure{}}
	var specs []nixtest.ClosureSpec
	for _, v := range o.Versions {
		f.Closures[v] = map[string]nixtest.Closure{}
		for _, h := range o.Spec.Hosts {
			s := o.Change[v][h.Name]
			s.Host, s.Version = h.Name, v
			specs = append(specs, s)
		}
	}
	for _, c := range nixtest.Build(t, specs...) {
		f.Closures[c.Spec.Version][c.Spec.Host] = c
	}
	listen := "127.0.0.1"
	var extra []string
	if f.Net != nil {
		listen = f.Net.Gateway
		extra = append(extra, f.Net.Gateway)
	}
	f.Cache = nixtest.NewCacheOn(t, listen+":0")
	for _, v := range o.Versions[1:] {
		for _, h := range o.Spec.Hosts {
			f.Cache.Add(t, f.Closures[v][h.Name], !slices.Contains(o.Unsigned[v], h.Name))
		}
	}

	f.Spec = o.Spec
	f.Spec.Closures = map[string]map[string]string{}
	for v, cs := range f.Closures {
		f.Spec.Closures[v] = map[string]string{}
		for h, c := range cs {
			f.Spec.Closures[v][h] = c.Name
		}
	}
	var err error
	if f.Repo, err = fleetrepo.Init(filepath.Join(f.Dir, "fleet")); err != nil {
		t.Fatal(err)
	}
	pub := f.Repo.Key.Public().Proto()
	f.Trust = filepath.Join(f.Dir, "trust.json")
	WriteJSON(t, f.Trust, proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: &pub}, CacheKeys: []string{f.Cache.PublicKey}})
	f.probes = filepath.Join(f.Dir, "probes.json")
	if err := os.WriteFile(f.probes, []byte(`{"failedUnits":{"enabled":false},"probes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}

	// The control plane, and an operator to read and drive it.
	if f.Cert, err = devcert.Write(f.Dir, time.Now(), extra...); err != nil {
		t.Fatal(err)
	}
	opPub, opKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	f.OpKey = filepath.Join(f.Dir, "operator_ed25519")
	WriteSSHKey(t, f.OpKey, opKey)
	opsFile := filepath.Join(f.Dir, "operators.json")
	WriteJSON(t, opsFile, []map[string]string{{"name": "olga", "role": "operator", "key": trust.SSHEd25519Line(opPub)}})
	db := o.DB
	if db == "" {
		db = "sqlite://" + filepath.Join(f.Dir, "cp.db")
	}
	args := append([]string{"serve", "--listen", listen + ":0", "--db", db,
		"--repo", f.Repo.Dir, "--trust", f.Trust, "--operators", opsFile, "--tls-cert", f.Cert.CertFile, "--tls-key", f.Cert.KeyFile,
		"--state-dir", filepath.Join(f.Dir, "cp-state"), "--poll-interval", "500ms", "--confirm-window", "2m"}, o.CPArgs...)
	f.CP = Start(t, "nixfleet-cp", exec.Command(f.Bin.CP, args...))
	f.CPURL = "https://" + ListenAddr(t, f.CP)
	if f.Op, err = apiclient.New(f.CPURL, apiclient.Options{Key: opKey, Name: "olga", ServerCAs: f.Cert.Pool}); err != nil {
		t.Fatal(err)
	}
	return f
}

// Closure is a host's closure at a version.
func (f *Fleet) Closure(version, host string) nixtest.Closure { return f.Closures[version][host] }

// Release signs the fleet at version as CI commit n and promotes it to
// the channels; it returns the commit id (the rollout of channel c is
// c + "@" + the id).
func (f *Fleet) Release(version string, n int, channels ...string) string {
	f.T.Helper()
	unsigned, err := f.Spec.Fleet(version)
	if err != nil {
		f.T.Fatal(err)
	}
	commit, err := f.Repo.Release(unsigned, fleetkit.Commit(n), time.Now().Add(time.Duration(n)*time.Second))
	if err != nil {
		f.T.Fatal(err)
	}
	for _, ch := range channels {
		if err := f.Repo.Promote(ch, commit); err != nil {
			f.T.Fatal(err)
		}
	}
	return fleetkit.Commit(n)
}

// AgentOptions change how StartAgent runs an agent.
type AgentOptions struct {
	CP    string             // the control plane URL (f.CPURL)
	Trust string             // trust.json (f.Trust)
	Key   ed25519.PrivateKey // the host key (the fleet's)
	Env   []string           // added to the host's environment
}

// Host returns the host called name, made on first use: its own /nix
// running the first version, on the network when there is one.
func (f *Fleet) Host(name string) *nixtest.Host {
	f.T.Helper()
	if h, ok := f.hosts[name]; ok {
		return h
	}
	h := nixtest.NewHost(f.T, name)
	first := ""
	for v := range f.Closures {
		if first == "" || v < first {
			first = v
		}
	}
	h.Seed(f.T, f.Closure(first, name))
	if f.Net != nil {
		f.Net.Attach(f.T, h)
	}
	f.hosts[name] = h
	return h
}

// StartAgent starts the agent of a host of the fleet (again, after a
// crash: the state directory is the host's).
func (f *Fleet) StartAgent(name string, o AgentOptions) *Proc {
	f.T.Helper()
	h := f.Host(name)
	if o.CP == "" {
		o.CP = f.CPURL
	}
	if o.Trust == "" {
		o.Trust = f.Trust
	}
	if o.Key == nil {
		for _, fh := range f.Spec.Hosts {
			if fh.Name == name {
				o.Key = fh.Key
			}
		}
	}
	keyFile := filepath.Join(h.Dir, "ssh_host_ed25519_key")
	WriteSSHKey(f.T, keyFile, o.Key)
	cmd := h.Command(context.Background(), f.Bin.Agent, "run", "--cp", o.CP, "--cp-ca", f.Cert.CertFile,
		"--hostname", name, "--host-key", keyFile, "--trust", o.Trust, "--state-dir", filepath.Join(h.Dir, "agent-state"),
		"--probes", f.probes, "--substituter", f.Cache.URL, "--current-system", h.CurrentSystemLink(),
		"--booted-system", h.BootedSystemLink(), "--detach", "", "--wait", "5s", "--quarantine", "1h")
	cmd.Env = append(cmd.Env, o.Env...)
	return Start(f.T, "agent "+name, cmd)
}

// Rollout reads a rollout from the control plane.
func (f *Fleet) Rollout(id string) (proto.Rollout, bool) {
	r, _, err := f.Op.Rollout(context.Background(), id)
	return r, err == nil
}

// States are a rollout's host states by host name (nil when the rollout
// cannot be read).
func (f *Fleet) States(id string) map[string]reconciler.HostState {
	r, ok := f.Rollout(id)
	if !ok {
		return nil
	}
	out := map[string]reconciler.HostState{}
	for _, h := range r.Hosts {
		out[h.Hostname] = reconciler.HostState(h.State)
	}
	return out
}

// Event is an entry of the control plane's journal.
type Event = proto.Event

// Events is a rollout's journal, oldest first.
func (f *Fleet) Events(id string) []Event {
	f.T.Helper()
	evs, _, err := f.Op.RolloutEvents(context.Background(), id, proto.EventQuery{})
	if err != nil {
		f.T.Fatal(err)
	}
	slices.SortFunc(evs, func(a, b Event) int { return int(a.ID - b.ID) })
	return evs
}

// Journal is a rollout's host events, "<to> <code>: <message>" by host.
func (f *Fleet) Journal(id string) map[string][]string {
	f.T.Helper()
	out := map[string][]string{}
	for _, e := range f.Events(id) {
		if e.Host != "" {
			out[e.Host] = append(out[e.Host], e.To+" "+e.Reason.Code+": "+e.Reason.Message)
		}
	}
	return out
}

// LogOnFailure logs a rollout as the control plane has it when the test
// failed.
func (f *Fleet) LogOnFailure(id string) {
	f.T.Cleanup(func() {
		if f.T.Failed() {
			var raw json.RawMessage
			_ = f.Op.Get(context.Background(), "/v1/rollouts/"+id, &raw)
			f.T.Logf("rollout %s: %s", id, raw)
		}
	})
}

// JournalMentions checks that each host's events mention a text.
func (f *Fleet) JournalMentions(id string, want map[string]string) {
	f.T.Helper()
	j := f.Journal(id)
	for host, text := range want {
		if !strings.Contains(strings.Join(j[host], "\n"), text) {
			f.T.Errorf("%s's events in %s do not mention %q:\n%s", host, id, text, strings.Join(j[host], "\n"))
		}
	}
}
