package demo

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// The demo's releases: v0 is what the hosts run when they start, v1 a good
// release (a kernel update for staging's second wave, whose hosts stage
// it for the next boot and are rebooted by the control plane), v2 a bad
// one (its canary fails its health probe).
const (
	v0 = "v0"
	v1 = "v1"
	v2 = "v2"
)

// Tunables of the demo's control plane and agents: everything reacts in
// tens of milliseconds instead of seconds.
const (
	tickInterval     = time.Second // periodic tick (time-based moves)
	pollInterval     = 200 * time.Millisecond
	debounce         = 25 * time.Millisecond
	longPoll         = 5 * time.Second // agents' check-in wait
	watchEvery       = 100 * time.Millisecond
	switchMin        = 100 * time.Millisecond // a simulated switch takes this
	switchSpread     = 300 * time.Millisecond // plus up to this
	confirmSeconds   = 30                     // seconds: confirm window
	readinessSeconds = 60                     // seconds: a wave without progress halts
	operatorName     = "demo-operator"
	approverName     = "demo-approver"
	probeName        = "healthz"
)

// Options configure a run of the demo.
type Options struct {
	// Hosts is the number of simulated hosts, MinHosts to MaxHosts.
	Hosts int
	// JSON: the report is one JSON document on stdout, and the progress
	// goes to stderr.
	JSON bool
	// Keep: after the story, the control plane and agents keep running
	// until ctx ends, and the directory is left in place.
	Keep bool
	// Timeout bounds the story.
	Timeout time.Duration
}

// Error is a failure of the demo with its stable code, and a hint for
// people. The codes: codes.SetupFailed (the directory, keys, repository or
// control plane could not be set up), codes.Timeout (Options.Timeout
// passed before the story ended), codes.Interrupted (ctx ended first),
// codes.UnexpectedState (a rollout took a state the story does not
// expect), and codes.Usage, codes.IOError and codes.Internal.
type Error struct {
	Code string
	Err  error
	Hint string
}

// Error is "<code>: <message>".
func (e *Error) Error() string { return e.Code + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// session is one run of the demo.
type session struct {
	opts Options
	// dashboard is, with --keep, the one-time dashboard link.
	dashboard string
	view      *view
	start     time.Time
	fleet     *fleet

	dir        string
	repo       *fleetrepo.Repo
	roots      *trust.Roots
	cert       devcert.Files
	trustFile  string
	opsFile    string
	opKey      ed25519.PrivateKey
	opKeyFile  string
	configFile string
	// approverConfig is the configuration of the demo's approver.
	approverConfig string
	logFile        *os.File
	lastSigned     time.Time
	commits        map[string]plumbing.Hash // by version

	url       string
	op        *apiclient.Client
	stopCP    func() error
	metrics   *serviceMetrics
	notifyLog *notificationLog
	// badSince is when each host began failing on a bad release: its
	// error ratio shows errorLag later.
	badMu     sync.Mutex
	badSince  map[string]time.Time
	agents    map[string]*simagent.Host
	stopHosts func()
	lastEvent int64
	// lastWait describes the last thing waited for, for a timeout.
	lastWait string
}

// Run runs the demo and reports it: the progress on stdout (stderr with
// opts.JSON), then a summary or, with opts.JSON, one JSON document on
// stdout. With opts.Keep it then waits for ctx to end. Its error is an
// *Error; the directory is removed unless opts.Keep is set or the demo
// failed other than by an interruption.
func Run(ctx context.Context, opts Options, stdout, stderr io.Writer) error {
	if opts.Hosts < MinHosts || opts.Hosts > MaxHosts {
		return errorf(codes.Usage, "%d hosts is out of range (%d to %d)", opts.Hosts, MinHosts, MaxHosts)
	}
	if opts.Timeout <= 0 {
		return errorf(codes.Usage, "the timeout must be positive")
	}
	progress := stdout
	if opts.JSON {
		progress = stderr
	}
	f, err := newFleet(opts.Hosts)
	if err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	d := &session{opts: opts, start: time.Now(), fleet: f, commits: map[string]plumbing.Hash{}, badSince: map[string]time.Time{}}
	d.view = newView(progress, f, d.start)

	rep, runErr := d.run(ctx)
	rep.DurationSeconds = seconds(time.Since(d.start))
	var de *Error
	if runErr != nil && !errors.As(runErr, &de) {
		de = &Error{Code: codes.Internal, Err: runErr}
	}
	if de != nil {
		rep.OK, rep.Code, rep.Message = false, de.Code, oneLine(de.Err.Error())
		if d.dir != "" && de.Code != codes.Interrupted {
			rep.Dir = d.dir
			kept := fmt.Sprintf("the control plane's log (cp.log), database (cp.db) and the fleet repository (fleet/) are kept in %s", d.dir)
			if de.Hint == "" {
				de.Hint = kept
			} else {
				de.Hint += "; " + kept
			}
		}
	}
	// With --keep the demo stays up for a look whenever its control plane
	// runs, also when the story failed: that is when there is most to see.
	keep := opts.Keep && d.op != nil && (de == nil || de.Code != codes.Interrupted)
	if keep {
		rep.Dir, rep.Config, rep.URL = d.dir, d.configFile, d.url
		// The dashboard, signed in: a one-time link for the demo's
		// operator, good for an hour (rfcs/0011).
		if login, _, err := d.op.WebLogin(ctx, 3600); err == nil {
			rep.Dashboard, d.dashboard = d.op.Link(login.Path), d.op.Link(login.Path)
		}
		st := state{PID: os.Getpid(), URL: d.url, Config: d.configFile, ApproverConfig: d.approverConfig,
			Next: 3, Latest: v2, LastSigned: d.lastSigned}
		if err := writeState(d.dir, st); err != nil && de == nil {
			de = &Error{Code: codes.IOError, Err: err}
		}
	}
	if opts.JSON {
		if err := writeJSON(stdout, rep); err != nil && de == nil {
			de = &Error{Code: codes.IOError, Err: err}
		}
	} else {
		d.summary(stdout, rep)
	}
	if keep {
		if de != nil {
			fmt.Fprintf(progress, "\nThe demo failed (%s: %s).\nIts control plane and agents keep running so that you can see why.\n",
				de.Code, oneLine(de.Err.Error()))
		}
		d.explain(progress)
		d.follow(ctx)
		// Nothing pushes to a demo that stopped, even if its pid is
		// reused later.
		_ = os.Remove(filepath.Join(d.dir, stateFile))
		fmt.Fprintf(progress, "\nstopping; %s is left in place (rm -rf %s)\n", d.dir, d.dir)
	}
	d.shutdown()
	if de == nil && !opts.Keep {
		if err := os.RemoveAll(d.dir); err != nil {
			return &Error{Code: codes.IOError, Err: err}
		}
		if !opts.JSON {
			fmt.Fprintf(stdout, "\nremoved %s; run the demo with --keep to explore the control plane afterwards\n", d.dir)
		}
	}
	if de != nil {
		if de.Code == codes.Interrupted && d.dir != "" {
			_ = os.RemoveAll(d.dir)
		}
		return de
	}
	return nil
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// run is the demo up to its report; the caller shuts it down.
func (d *session) run(parent context.Context) (report, error) {
	rep := report{Hosts: len(d.fleet.hosts), Rollouts: []rolloutReport{}, Channels: d.channelReports()}
	ctx, cancel := context.WithTimeout(parent, d.opts.Timeout)
	defer cancel()
	if err := d.setup(); err != nil {
		return rep, &Error{Code: codes.SetupFailed, Err: err}
	}
	if err := d.startControlPlane(ctx); err != nil {
		return rep, d.waitError(ctx, parent, err)
	}
	if err := d.startAgents(); err != nil {
		return rep, &Error{Code: codes.SetupFailed, Err: err}
	}

	err := d.enrol(ctx)
	if err == nil {
		err = d.goodRelease(ctx)
	}
	if err == nil {
		err = d.badRelease(ctx)
	}
	// The report is read with its own deadline, so a timeout still shows
	// where every rollout stood.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(parent), 10*time.Second)
	defer rcancel()
	rollouts, rerr := d.rollouts(rctx)
	if rerr == nil {
		rep.Rollouts = rollouts
	}
	if err != nil {
		return rep, d.waitError(ctx, parent, err)
	}
	if rerr != nil {
		return rep, errorf(codes.Internal, "reading the rollouts: %w", rerr)
	}
	if err := checkOutcome(rollouts); err != nil {
		return rep, err
	}
	rep.OK = true
	return rep, nil
}

// waitError turns a context error into the demo's timeout or interruption.
func (d *session) waitError(ctx, parent context.Context, err error) error {
	var de *Error
	switch {
	case errors.As(err, &de):
		return err
	case parent.Err() != nil:
		return &Error{Code: codes.Interrupted, Err: errors.New("stopped by a signal before the demo finished")}
	case ctx.Err() != nil:
		return &Error{Code: codes.Timeout, Err: fmt.Errorf("gave up after %s %s", d.opts.Timeout, d.lastWait),
			Hint: "a slow machine may need a longer --timeout"}
	}
	return err
}

// ---- setting up ----

// setup makes the temporary directory: the fleet repository with its CI
// key, trust.json, the TLS certificate, the operator's key, the operators
// file and an operator config file; and signs and pushes v0.
func (d *session) setup() error {
	dir, err := os.MkdirTemp("", "nixfleet-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	if d.repo, err = fleetrepo.Init(filepath.Join(dir, "fleet")); err != nil {
		return err
	}
	trustJSON := d.repo.TrustJSON()
	if d.roots, err = trust.ParseRoots(trustJSON); err != nil {
		return err
	}
	d.trustFile = filepath.Join(dir, "trust.json")
	if err := os.WriteFile(d.trustFile, trustJSON, 0o644); err != nil {
		return err
	}
	if d.cert, err = devcert.Write(dir, time.Now()); err != nil {
		return err
	}

	// CI's key, kept for nixfleet-demo push, which signs the next
	// releases in another process.
	ciPEM, err := d.repo.Key.MarshalPKCS8PEM()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ciKeyFile), ciPEM, 0o600); err != nil {
		return err
	}
	// The operators: one who acts, one who approves (rfcs/0007
	// §Authentication).
	var ops []map[string]string
	for _, o := range []struct {
		name, role, file string
		key              *ed25519.PrivateKey
	}{{operatorName, "operator", operatorKeyFile, &d.opKey}, {approverName, "approver", approverKeyFile, nil}} {
		key, pubLine, err := writeOperatorKey(filepath.Join(dir, o.file), o.name)
		if err != nil {
			return err
		}
		if o.key != nil {
			*o.key = key
		}
		ops = append(ops, map[string]string{"name": o.name, "role": o.role, "key": pubLine})
	}
	d.opKeyFile = filepath.Join(dir, operatorKeyFile)
	opsJSON, err := json.MarshalIndent(ops, "", "  ")
	if err != nil {
		return err
	}
	d.opsFile = filepath.Join(dir, "operators.json")
	if err := os.WriteFile(d.opsFile, append(opsJSON, '\n'), 0o644); err != nil {
		return err
	}
	if d.logFile, err = os.Create(filepath.Join(dir, "cp.log")); err != nil {
		return err
	}
	// What the hosts run today, released before the control plane starts,
	// so that it knows the host keys when the agents first call.
	return d.publish(v0, stagingChannel, prodChannel)
}

// writeOperatorKey makes an operator's OpenSSH ed25519 key, as ssh-keygen
// writes it, into file and file.pub; it returns the key and its public
// line.
func writeOperatorKey(file, name string) (ed25519.PrivateKey, string, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	block, err := ssh.MarshalPrivateKey(key, name)
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, "", err
	}
	line := trust.SSHEd25519Line(pub)
	if err := os.WriteFile(file+".pub", []byte(line+" "+name+"\n"), 0o644); err != nil {
		return nil, "", err
	}
	return key, line, nil
}

// publish signs a version of the fleet as CI does and moves channel refs
// to it, as an operator's git push does.
func (d *session) publish(version string, channels ...string) error {
	unsigned, err := d.fleet.unsigned(version)
	if err != nil {
		return err
	}
	// signedAt has a resolution of a second, and a channel only takes a
	// release signed strictly later than its current one (rfcs/0006
	// §Channel source 4): a quick demo signs up to a second ahead.
	at := time.Now().UTC().Truncate(time.Second)
	if !at.After(d.lastSigned) {
		at = d.lastSigned.Add(time.Second)
	}
	commit, err := d.repo.Release(unsigned, commitOf(version), at)
	if err != nil {
		return fmt.Errorf("signing %s: %w", version, err)
	}
	d.lastSigned = at
	d.commits[version] = commit
	d.view.mu.Lock()
	d.view.release[commitOf(version)] = version
	d.view.mu.Unlock()
	for _, ch := range channels {
		if err := d.promote(version, ch); err != nil {
			return err
		}
	}
	return nil
}

// promote moves a channel ref to a published version.
func (d *session) promote(version, channel string) error {
	if err := d.repo.Promote(channel, d.commits[version]); err != nil {
		return fmt.Errorf("promoting %s on %s: %w", version, channel, err)
	}
	return nil
}

func rolloutID(channel, version string) string { return channel + "@" + commitOf(version) }

// startControlPlane starts a control plane on 127.0.0.1 (a free port) with
// TLS and embedded SQLite, and waits until it is ready.
func (d *session) startControlPlane(ctx context.Context) error {
	var err error
	if d.metrics, err = startServiceMetrics(d.fleet.hostNames(), d.errorRatio); err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	if d.notifyLog, err = startNotificationLog(d.dir); err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	cfg := controlplane.Config{
		Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(d.dir, "cp.db"), Repo: d.repo.Dir,
		StateDir: filepath.Join(d.dir, "cp-state"), TrustFile: d.trustFile, OperatorsFile: d.opsFile,
		TLSCert: d.cert.CertFile, TLSKey: d.cert.KeyFile, ReplicaID: "demo",
		TickInterval: tickInterval, PollInterval: pollInterval, Debounce: debounce,
		Tunables: reconciler.Tunables{ConfirmWindowSeconds: confirmSeconds, ReadinessDeadlineSeconds: readinessSeconds},
		// A query to the stand-in is answered in microseconds; the
		// timeout is Prometheus's own default so that a machine busy
		// with other work does not make the analysis inconclusive.
		Prometheus: prom.Config{URL: d.metrics.url, Timeout: 10 * time.Second},
		// The journal's notifications go to a webhook sink of the demo's
		// own, which writes them to notifications.log.
		Notifications: []notify.Sink{d.notifyLog.sink()},
	}
	log := slog.New(slog.NewJSONHandler(d.logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := controlplane.New(ctx, cfg, log)
	if err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	d.stopCP = func() error {
		cancel()
		return <-done
	}
	d.url = "https://" + srv.Addr()
	if d.op, err = apiclient.New(d.url, apiclient.Options{Key: d.opKey, Name: operatorName, ServerCAs: d.cert.Pool, Timeout: 20 * time.Second}); err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	if err := d.writeConfig(); err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	d.header()
	return d.wait(ctx, "for the control plane to be ready", func() (bool, error) {
		var out map[string]string
		return d.op.Get(ctx, "/readyz", &out) == nil, nil
	})
}

// writeConfig writes the operator configurations for the operator
// commands (NIXFLEET_CONFIG): config.toml as the demo's operator,
// approver.toml as its approver.
func (d *session) writeConfig() error {
	d.configFile = filepath.Join(d.dir, "config.toml")
	d.approverConfig = filepath.Join(d.dir, "approver.toml")
	for _, c := range []struct{ file, key, name string }{
		{d.configFile, d.opKeyFile, operatorName},
		{d.approverConfig, filepath.Join(d.dir, approverKeyFile), approverName},
	} {
		body := fmt.Sprintf("# nixfleet operator configuration of the demo's control plane, as %s.\n"+
			"cp = %s\nkey = %s\nname = %s\nca = %s\n",
			c.name, tomlString(d.url), tomlString(c.key), tomlString(c.name), tomlString(d.cert.CertFile))
		if err := os.WriteFile(c.file, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// tomlString is s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// startAgents starts one simulated agent per host, on v0, each with its
// own mutual TLS client over its host key. A host's health probe fails
// while it runs a bad release.
func (d *session) startAgents() error {
	agents := map[string]*simagent.Host{}
	d.agents = agents
	clients := map[string]*apiclient.Client{}
	for _, h := range d.fleet.hosts {
		client, err := apiclient.New(d.url, apiclient.Options{Key: h.key, Name: h.name, ServerCAs: d.cert.Pool,
			Timeout: longPoll + 20*time.Second})
		if err != nil {
			return err
		}
		clients[h.name] = client
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, h := range d.fleet.hosts {
		client := clients[h.name]
		a := simagent.New(h.name, h.key, client, d.fleet.closure(h.name, v0))
		a.Roots = d.roots // verify every manifest, as the real agent does
		current := d.fleet.closure(h.name, v0)
		kernel := d.fleet.closure(h.name, v1)
		staged := h.channel == stagingChannel && h.wave > 0
		a.Decide = func(t proto.Target) simagent.Action {
			// A switch takes a moment, so that hosts are seen in flight;
			// taking on v0, which the host runs already, does not.
			if t.Closure != current {
				time.Sleep(switchMin + mrand.N(switchSpread))
			}
			if staged && t.Closure == kernel && t.ManagedReboot {
				return simagent.Defer // a new kernel: the control plane reboots it
			}
			return simagent.Confirm
		}
		agents[h.name] = a
		after := d.healthFollowsRelease(a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			runAgent(ctx, a, after)
		}()
	}
	d.stopHosts = func() {
		cancel()
		wg.Wait()
	}
	return nil
}

// runAgent checks in (long-polling) until ctx ends, calling after each
// check-in; errors are retried after a pause.
func runAgent(ctx context.Context, a *simagent.Host, after func(context.Context)) {
	for ctx.Err() == nil {
		err := a.Step(ctx, longPoll)
		after(ctx)
		if err != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// healthFollowsRelease makes a host's health probe fail while it runs a
// bad release (v2, or one pushed with --bad), and pass again once it runs
// another; the host checks in at once with the change. A check-in, not a
// probe_results report: it also says what the host runs, which its confirm
// did not (rfcs/0006 §Check-ins at scale 4), so the reason a host fails
// does not depend on whether a tick ran between the confirm and the
// host's next check-in.
func (d *session) healthFollowsRelease(a *simagent.Host) func(context.Context) {
	failing := false
	return func(ctx context.Context) {
		cur := a.Current()
		switch bad := d.badClosure(a.Name, cur); {
		case bad && !failing:
			failing = true
			d.setBad(a.Name, time.Now())
			a.SetFailingProbes(probeName)
			d.view.note("%s switched to %s and its health probe %q fails; the agent checks in at once", a.Name, d.versionOf(a.Name, cur), probeName)
		case !bad && failing:
			failing = false
			d.setBad(a.Name, time.Time{})
			a.SetFailingProbes()
			d.view.note("%s is back on %s; its health probe passes again", a.Name, d.versionOf(a.Name, cur))
		default:
			return
		}
		// Best effort: the next check-in carries the probes anyway.
		_ = a.Step(ctx, 0)
	}
}

// badClosure reports whether a host's closure is of a bad release.
func (d *session) badClosure(host, closure string) bool {
	return closure == d.fleet.closure(host, v2) || strings.HasSuffix(closure, badSuffix)
}

// errorLag is how long after the canary's health probe fails its error
// ratio shows it: the agent reports a probe at once, monitoring sees the
// errors later. It keeps the demo's story one story on a loaded machine:
// v2's canary fails by its probe, reported within milliseconds, never by
// the wave's analysis, which measures one second after the host runs v2
// and would win when the report came later than that.
const errorLag = 5 * time.Second

// errorRatio is a host's services' error ratio, as the demo's monitoring
// reports it: 0.4% normally, 30% once the host has run a bad release for
// errorLag.
func (d *session) errorRatio(host string) float64 {
	d.badMu.Lock()
	since := d.badSince[host]
	d.badMu.Unlock()
	if !since.IsZero() && time.Since(since) >= errorLag {
		return 0.3
	}
	return 0.004
}

// setBad records when a host began failing (zero: it does not).
func (d *session) setBad(host string, t time.Time) {
	d.badMu.Lock()
	defer d.badMu.Unlock()
	if t.IsZero() {
		delete(d.badSince, host)
		return
	}
	d.badSince[host] = t
}

// versionOf names the release a host's closure was built at.
func (d *session) versionOf(host, closure string) string {
	if _, v, ok := strings.Cut(closure, "-nixos-system-"+host+"-"); ok {
		return v
	}
	return closure
}

func (d *session) shutdown() {
	if d.stopHosts != nil {
		d.stopHosts()
	}
	if d.stopCP != nil {
		if err := d.stopCP(); err != nil {
			fmt.Fprintf(d.view.w, "control plane: %v\n", err)
		}
	}
	if d.metrics != nil {
		d.metrics.stop()
	}
	if d.notifyLog != nil {
		d.notifyLog.stop()
	}
	if d.logFile != nil {
		d.logFile.Close()
	}
}

// ---- the story ----

// enrol waits for the agents to check in and adopt v0, the release of
// what they already run: its rollouts opened before any host had called,
// so the hosts are Skipped first and catch up as they check in. The
// journal of that is not shown.
func (d *session) enrol(ctx context.Context) error {
	d.view.section("[1/3] enrolment: %d agents check in on v0, the release of what their hosts run today", len(d.fleet.hosts))
	d.view.setQuiet(true)
	defer d.view.setQuiet(false)
	start := time.Now()
	err := d.waitRollouts(ctx, "for every host to check in on v0", []expectation{
		{id: rolloutID(stagingChannel, v0), channel: stagingChannel, final: reconciler.RolloutConverged, allHosts: true,
			passing: []reconciler.RolloutState{reconciler.RolloutOpening, reconciler.RolloutActive}},
		{id: rolloutID(prodChannel, v0), channel: prodChannel, final: reconciler.RolloutConverged, allHosts: true,
			passing: []reconciler.RolloutState{reconciler.RolloutOpening, reconciler.RolloutActive}},
	})
	if err != nil {
		return err
	}
	d.view.note("all %d hosts checked in over mutual TLS and run v0 (%.2fs)", len(d.fleet.hosts), time.Since(start).Seconds())
	d.view.flush()
	return nil
}

// goodRelease signs v1 and pushes both channel refs, and shows the
// rollout until both channels converged.
func (d *session) goodRelease(ctx context.Context) error {
	d.view.section("[2/3] release v1: CI signs it, an operator pushes channels/staging, then channels/prod; staging's second wave gets a new kernel, staged for the next boot, and the control plane reboots its hosts under staging's budget")
	if err := d.publish(v1, stagingChannel); err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	d.view.note("pushed v1 to staging (rollout %s)", rolloutID(stagingChannel, v1))
	// The control plane reads the refs of one poll in name order and may
	// tick between two of them, so refs pushed together may open prod
	// before it knows staging moved: prod is pushed once staging opened.
	err := d.wait(ctx, "for v1 to open on staging", func() (bool, error) {
		_, _, opened := d.view.rolloutState(rolloutID(stagingChannel, v1))
		return opened, nil
	})
	if err != nil {
		return err
	}
	if err := d.promote(v1, prodChannel); err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	d.view.note("pushed v1 to prod (rollout %s): it follows staging", rolloutID(prodChannel, v1))
	passing := []reconciler.RolloutState{reconciler.RolloutOpening, reconciler.RolloutActive}
	return d.waitRollouts(ctx, "for v1 to converge", []expectation{
		{id: rolloutID(stagingChannel, v1), channel: stagingChannel, final: reconciler.RolloutConverged, allHosts: true, passing: passing},
		{id: rolloutID(prodChannel, v1), channel: prodChannel, final: reconciler.RolloutConverged, allHosts: true, passing: passing},
	})
}

// badRelease signs v2 and pushes it to staging only; its canary fails the
// health gate, and the policy (rollback-and-halt) rolls it back.
func (d *session) badRelease(ctx context.Context) error {
	c := d.fleet.channel(stagingChannel)
	d.view.section("[3/3] release v2 (bad): pushed to staging, whose policy is onHealthFailure: %s", c.onHealthFailure)
	if err := d.publish(v2, stagingChannel); err != nil {
		return &Error{Code: codes.SetupFailed, Err: err}
	}
	d.view.note("pushed v2 to staging (rollout %s); prod stays on v1", rolloutID(stagingChannel, v2))
	canary := d.agents[c.canary]
	back := d.fleet.closure(c.canary, v1)
	err := d.waitRollouts(ctx, "for v2 to be rolled back", []expectation{
		{id: rolloutID(stagingChannel, v2), channel: stagingChannel, final: reconciler.RolloutReverted,
			passing: []reconciler.RolloutState{reconciler.RolloutOpening, reconciler.RolloutActive, reconciler.RolloutReverting},
			also:    func() bool { return canary.Current() == back }},
	})
	if err != nil {
		return err
	}
	d.view.note("v2 was stopped at its canary: %s runs v1 again, the rest of staging and all of prod never left v1", c.canary)
	d.view.flush()
	return nil
}

// expectation is what a phase waits for in one rollout.
type expectation struct {
	id, channel string
	final       reconciler.RolloutState
	// passing are the states it may go through on the way.
	passing []reconciler.RolloutState
	// allHosts: every host of the channel must be Converged in it.
	allHosts bool
	// also must hold as well.
	also func() bool
}

// waitRollouts follows the journal until every expectation holds, and
// fails at once when a rollout takes a state it should not.
func (d *session) waitRollouts(ctx context.Context, what string, exps []expectation) error {
	return d.wait(ctx, what, func() (bool, error) {
		done := true
		var where []string
		for _, e := range exps {
			st, reason, ok := d.view.rolloutState(e.id)
			switch {
			case !ok:
				done = false
				where = append(where, e.id+" has not opened")
				continue
			case st == e.final:
			case slices.Contains(e.passing, st):
				done = false
			default:
				return false, errorf(codes.UnexpectedState, "rollout %s is %s (%s: %s), want %s",
					e.id, st, reason.Code, reason.Message, e.final)
			}
			c := d.fleet.channel(e.channel)
			counts := d.view.hostCounts(e.id, c.hosts)
			where = append(where, fmt.Sprintf("%s is %s, hosts: %s", e.id, st, countsText(counts, len(c.hosts))))
			if e.allHosts && counts[reconciler.HostConverged] != len(c.hosts) {
				done = false
			}
			if e.also != nil && !e.also() {
				done = false
			}
		}
		d.lastWait = "waiting " + what + ": " + strings.Join(where, "; ")
		return done, nil
	})
}

// wait prints the journal as it grows and checks cond every
// watchEvery until it holds, fails, or ctx ends.
func (d *session) wait(ctx context.Context, what string, cond func() (bool, error)) error {
	d.lastWait = "waiting " + what
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	var lastErr error
	for {
		if d.op != nil {
			if err := d.pump(ctx); err != nil {
				lastErr = err // retried; a timeout names it
			}
		}
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				d.lastWait += fmt.Sprintf(" (last error: %v)", lastErr)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// pump prints the events written since the last call.
func (d *session) pump(ctx context.Context) error {
	const page = 1000
	for {
		evs, _, err := d.op.Events(ctx, proto.EventQuery{AfterID: d.lastEvent, Limit: page})
		if err != nil {
			return err
		}
		d.view.events(evs)
		if n := len(evs); n > 0 {
			d.lastEvent = evs[n-1].ID
		}
		if len(evs) < page {
			return nil
		}
	}
}

// follow prints the journal as it grows until ctx ends: with --keep, the
// demo's terminal is a live feed of what the operator commands and
// nixfleet-demo push start.
func (d *session) follow(ctx context.Context) {
	t := time.NewTicker(4 * watchEvery)
	defer t.Stop()
	for {
		_ = d.pump(ctx) // retried at the next tick
		select {
		case <-ctx.Done():
			// What happened since the last page, before stopping.
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = d.pump(last)
			return
		case <-t.C:
		}
	}
}

// ---- the report ----

// report is the --json document.
type report struct {
	// OK is true when v1 converged and v2 was rolled back.
	OK bool `json:"ok"`
	// Code and Message say why not.
	Code            string          `json:"code,omitempty"`
	Message         string          `json:"message,omitempty"`
	Hosts           int             `json:"hosts"`
	DurationSeconds float64         `json:"durationSeconds"`
	Channels        []channelReport `json:"channels"`
	// Rollouts are every rollout of the demo, oldest first.
	Rollouts []rolloutReport `json:"rollouts"`
	// Dir is kept with --keep or after a failure; Config and URL with
	// --keep.
	Dir    string `json:"dir,omitempty"`
	Config string `json:"config,omitempty"`
	URL    string `json:"url,omitempty"`
	// Dashboard is, with --keep, a one-time link that opens the dashboard
	// signed in as the demo's operator (valid for an hour).
	Dashboard string `json:"dashboard,omitempty"`
}

type channelReport struct {
	Name            string   `json:"name"`
	Hosts           int      `json:"hosts"`
	Waves           []string `json:"waves"`
	OnHealthFailure string   `json:"onHealthFailure"`
}

type rolloutReport struct {
	ID      string `json:"id"`
	Channel string `json:"channel"`
	// Release is v0 (baseline), v1 (good) or v2 (bad); Role says which.
	Release string `json:"release"`
	Role    string `json:"role"`
	State   string `json:"state"`
	// Expected is the state the demo expects it to end in.
	Expected string               `json:"expected"`
	Reason   proto.DecisionReason `json:"reason"`
	// Terminal is true once the state is final (rfcs/0005).
	Terminal  bool           `json:"terminal"`
	Hosts     int            `json:"hosts"`
	Counts    map[string]int `json:"counts"`
	OpenedAt  time.Time      `json:"openedAt"`
	UpdatedAt time.Time      `json:"updatedAt"`
	// DurationSeconds is from opening to the final state, or so far.
	DurationSeconds float64 `json:"durationSeconds"`
}

func (d *session) channelReports() []channelReport {
	var out []channelReport
	for _, c := range d.fleet.channels {
		r := channelReport{Name: c.name, Hosts: len(c.hosts), OnHealthFailure: c.onHealthFailure}
		for _, w := range c.waves {
			r.Waves = append(r.Waves, fmt.Sprintf("%s (%d)", w.name, len(w.hosts)))
		}
		out = append(out, r)
	}
	return out
}

// rollouts reads every rollout from the control plane, oldest first.
func (d *session) rollouts(ctx context.Context) ([]rolloutReport, error) {
	if d.op == nil {
		return []rolloutReport{}, nil
	}
	list, _, err := d.op.Rollouts(ctx)
	if err != nil {
		return nil, err
	}
	out := []rolloutReport{}
	for _, r := range slices.Backward(list) {
		s, _, err := d.op.Rollout(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		rel := d.view.releaseOf(r.ID)
		rr := rolloutReport{ID: s.ID, Channel: s.Channel, Release: rel, State: s.State, Reason: s.Reason,
			Counts: map[string]int{}, OpenedAt: s.OpenedAt, UpdatedAt: s.UpdatedAt,
			Terminal: reconciler.RolloutState(s.State).Terminal()}
		if rr.Terminal {
			rr.DurationSeconds = seconds(s.UpdatedAt.Sub(s.OpenedAt))
		} else {
			rr.DurationSeconds = seconds(time.Since(s.OpenedAt))
		}
		for st, n := range s.Counts { // every host: s.Hosts is the first page
			rr.Counts[st] = n
			rr.Hosts += n
		}
		switch rel {
		case v0:
			rr.Role, rr.Expected = "baseline", string(reconciler.RolloutConverged)
		case v1:
			rr.Role, rr.Expected = "good", string(reconciler.RolloutConverged)
		case v2:
			rr.Role, rr.Expected = "bad", string(reconciler.RolloutReverted)
		}
		out = append(out, rr)
	}
	// Rollouts opened in one tick come in no particular order: staging
	// first.
	slices.SortStableFunc(out, func(a, b rolloutReport) int {
		if c := a.OpenedAt.Compare(b.OpenedAt); c != 0 {
			return c
		}
		return strings.Compare(b.Channel, a.Channel) // "staging" before "prod"
	})
	return out, nil
}

// checkOutcome checks the final state of every rollout: the two of each
// channel for v0 and v1 Converged with every host, v2 on staging Reverted
// with only its canary moved, nothing else.
func checkOutcome(rs []rolloutReport) error {
	want := map[string]bool{}
	for _, ch := range []string{stagingChannel, prodChannel} {
		want[rolloutID(ch, v0)] = true
		want[rolloutID(ch, v1)] = true
	}
	want[rolloutID(stagingChannel, v2)] = true
	for _, r := range rs {
		if !want[r.ID] {
			return errorf(codes.UnexpectedState, "unexpected rollout %s (%s)", r.ID, r.State)
		}
		delete(want, r.ID)
		if r.State != r.Expected {
			return errorf(codes.UnexpectedState, "rollout %s is %s, want %s", r.ID, r.State, r.Expected)
		}
		if r.Role != "bad" && r.Counts[string(reconciler.HostConverged)] != r.Hosts {
			return errorf(codes.UnexpectedState, "rollout %s converged with hosts %v", r.ID, r.Counts)
		}
		if r.Role == "bad" && (r.Counts[string(reconciler.HostReverted)] != 1 || r.Counts[string(reconciler.HostPending)] != r.Hosts-1) {
			return errorf(codes.UnexpectedState, "rollout %s was reverted with hosts %v, want its canary Reverted and the rest Pending", r.ID, r.Counts)
		}
	}
	for id := range want {
		return errorf(codes.UnexpectedState, "rollout %s never opened", id)
	}
	return nil
}
