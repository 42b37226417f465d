package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// Probe defaults and limits.
const (
	// DefaultInterval is the interval of a probe (and of the
	// failed-units check) whose file entry gives none.
	DefaultInterval = 30 * time.Second
	// DefaultTimeout is the timeout of a probe whose file entry gives
	// none.
	DefaultTimeout = 5 * time.Second
	// MinInterval is the shortest interval a probes file may ask for.
	MinInterval = time.Second

	// ErrorFailedUnits is the pseudo-unit reported in place of the
	// failed units when the failed-units command itself fails (cannot
	// start, exits non-zero, times out), so a broken check shows up as
	// unhealthy rather than as a host without failed units.
	ErrorFailedUnits = "nixfleet-probe-error:failed-units"
	// DetailFailedUnits is the key of the failed-units check in
	// Runner.Details. Probe names cannot contain '@', so it never
	// collides with a probe.
	DetailFailedUnits = "@failed-units"

	// maxBody caps how much of an http probe's response body is read.
	maxBody = 64 << 10
	// maxOutput caps how much output of an exec probe or of the
	// failed-units command is kept.
	maxOutput = 1 << 20
	// maxReason caps the length of a result's reason.
	maxReason = 256
	// waitDelay bounds how long a killed command's leftover children
	// may hold its output open.
	waitDelay = time.Second
)

// DefaultFailedUnitsCommand returns the command that lists failed systemd
// units when the probes file names none.
func DefaultFailedUnitsCommand() []string {
	return []string{"systemctl", "--failed", "--plain", "--no-legend", "--no-pager"}
}

// ErrConfig is wrapped by every validation error of Load, Parse and
// Config.Validate. Decoding errors wrap proto.ErrMalformed instead; a
// missing file, fs.ErrNotExist.
var ErrConfig = errors.New("invalid probe config")

// Type is the kind of a probe.
type Type string

// Probe types.
const (
	// HTTP passes when a GET of URL answers with the expected status.
	HTTP Type = "http"
	// TCP passes when a TCP connection to Address opens.
	TCP Type = "tcp"
	// Exec passes when Command exits 0.
	Exec Type = "exec"
)

// Spec is one configured probe.
type Spec struct {
	// Name identifies the probe in reports: non-empty, [A-Za-z0-9._-]+,
	// unique within a config.
	Name string
	Type Type
	// URL (http only) is an http or https URL.
	URL string
	// ExpectStatus (http only) is the status that passes; 0 accepts any
	// 2xx. Redirects are not followed.
	ExpectStatus int
	// Address (tcp only) is host:port.
	Address string
	// Command (exec only) is the program and its arguments, run without a
	// shell. A program name without a slash is looked up in the agent's
	// PATH at each run.
	Command []string
	// Interval is the time between the starts of two runs; Timeout bounds
	// each run. NewRunner replaces zero values with the defaults.
	Interval time.Duration
	Timeout  time.Duration
}

// FailedUnits configures the failed-units check.
type FailedUnits struct {
	Enabled bool
	// Command prints the failed units, one per line, as
	// DefaultFailedUnitsCommand does. Empty means the default.
	Command []string
	// Ignore lists path.Match patterns; matching units are not reported.
	Ignore []string
	// Interval and Timeout work as in Spec.
	Interval time.Duration
	Timeout  time.Duration
}

// Config is the agent's probes configuration.
type Config struct {
	FailedUnits FailedUnits
	Probes      []Spec
}

// DefaultConfig is the configuration without a probes file: no probes,
// and the failed-units check enabled with the default command.
func DefaultConfig() Config {
	return Config{FailedUnits: FailedUnits{
		Enabled:  true,
		Command:  DefaultFailedUnitsCommand(),
		Interval: DefaultInterval,
		Timeout:  DefaultTimeout,
	}}
}

// Load reads and validates the probes file at path. An empty path means
// DefaultConfig; a path that does not exist is an error (wrapping
// fs.ErrNotExist).
func Load(path string) (Config, error) {
	if path == "" {
		return DefaultConfig(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read probes file: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("probes file %s: %w", path, err)
	}
	return cfg, nil
}

// file is the JSON form of a probes file.
type file struct {
	FailedUnits *fileFailedUnits `json:"failedUnits"`
	Probes      []fileSpec       `json:"probes"`
}

type fileFailedUnits struct {
	// Enabled absent or null means true.
	Enabled  *bool    `json:"enabled"`
	Command  []string `json:"command"`
	Ignore   []string `json:"ignore"`
	Interval string   `json:"interval"`
	Timeout  string   `json:"timeout"`
}

type fileSpec struct {
	Name         string   `json:"name"`
	Type         string   `json:"type"`
	URL          string   `json:"url"`
	ExpectStatus int      `json:"expectStatus"`
	Address      string   `json:"address"`
	Command      []string `json:"command"`
	Interval     string   `json:"interval"`
	Timeout      string   `json:"timeout"`
}

// Parse decodes and validates the bytes of a probes file. A missing
// failedUnits member means the default check; defaults fill absent
// intervals and timeouts.
func Parse(data []byte) (Config, error) {
	var f file
	if err := proto.Decode(data, &f); err != nil {
		return Config{}, err
	}
	cfg := DefaultConfig()
	if fu := f.FailedUnits; fu != nil {
		cfg.FailedUnits.Enabled = fu.Enabled == nil || *fu.Enabled
		if len(fu.Command) > 0 {
			cfg.FailedUnits.Command = fu.Command
		}
		cfg.FailedUnits.Ignore = fu.Ignore
		var err error
		if cfg.FailedUnits.Interval, cfg.FailedUnits.Timeout, err = parseTimes(fu.Interval, fu.Timeout); err != nil {
			return Config{}, fmt.Errorf("%w: failedUnits: %w", ErrConfig, err)
		}
	}
	for i, p := range f.Probes {
		s := Spec{
			Name: p.Name, Type: Type(p.Type), URL: p.URL, ExpectStatus: p.ExpectStatus,
			Address: p.Address, Command: p.Command,
		}
		var err error
		if s.Interval, s.Timeout, err = parseTimes(p.Interval, p.Timeout); err != nil {
			return Config{}, fmt.Errorf("%w: %s: %w", ErrConfig, label(i, p.Name), err)
		}
		cfg.Probes = append(cfg.Probes, s)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func parseTimes(interval, timeout string) (time.Duration, time.Duration, error) {
	i, t := DefaultInterval, DefaultTimeout
	var err error
	if interval != "" {
		if i, err = time.ParseDuration(interval); err != nil {
			return 0, 0, fmt.Errorf("interval: %w", err)
		}
	}
	if timeout != "" {
		if t, err = time.ParseDuration(timeout); err != nil {
			return 0, 0, fmt.Errorf("timeout: %w", err)
		}
	}
	return i, t, nil
}

// label names a probe in errors, by position when it has no name.
func label(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("probes[%d]", i)
	}
	return fmt.Sprintf("probe %q", name)
}

// Validate checks a configuration as Load does: every error wraps
// ErrConfig and names the probe (or probes[i] when it has no name)
// and the field. NewRunner does not call it, so tests may use
// intervals below MinInterval.
func (c Config) Validate() error {
	if fu := c.FailedUnits; fu.Enabled {
		if err := validateTimes(fu.Interval, fu.Timeout); err != nil {
			return fmt.Errorf("%w: failedUnits: %w", ErrConfig, err)
		}
		if len(fu.Command) > 0 && fu.Command[0] == "" {
			return fmt.Errorf("%w: failedUnits: command: empty program name", ErrConfig)
		}
		for _, g := range fu.Ignore {
			if _, err := path.Match(g, ""); err != nil {
				return fmt.Errorf("%w: failedUnits: ignore pattern %q: %w", ErrConfig, g, err)
			}
		}
	}
	seen := make(map[string]bool, len(c.Probes))
	for i, p := range c.Probes {
		if err := validateSpec(p); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConfig, label(i, p.Name), err)
		}
		if seen[p.Name] {
			return fmt.Errorf("%w: %s: duplicate name", ErrConfig, label(i, p.Name))
		}
		seen[p.Name] = true
	}
	return nil
}

func validateSpec(p Spec) error {
	if p.Name == "" {
		return errors.New("name: empty")
	}
	for _, r := range p.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("name: %q not allowed (want [A-Za-z0-9._-]+)", r)
		}
	}
	if err := validateTimes(p.Interval, p.Timeout); err != nil {
		return err
	}
	switch p.Type {
	case HTTP, TCP, Exec:
	case "":
		return errors.New("type: required (http, tcp or exec)")
	default:
		return fmt.Errorf("type: unknown %q (want http, tcp or exec)", p.Type)
	}
	// Fields of another type are refused: they are likely a mistake.
	for _, f := range []struct {
		field string
		set   bool
		typ   Type
	}{
		{"url", p.URL != "", HTTP},
		{"expectStatus", p.ExpectStatus != 0, HTTP},
		{"address", p.Address != "", TCP},
		{"command", len(p.Command) > 0, Exec},
	} {
		if f.set && p.Type != f.typ {
			return fmt.Errorf("%s: only for %s probes, not %s", f.field, f.typ, p.Type)
		}
	}
	switch p.Type {
	case HTTP:
		if p.URL == "" {
			return errors.New("url: required for http probes")
		}
		u, err := url.Parse(p.URL)
		if err != nil {
			return fmt.Errorf("url: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("url: scheme %q (want http or https)", u.Scheme)
		}
		if u.Host == "" {
			return errors.New("url: no host")
		}
		if p.ExpectStatus != 0 && (p.ExpectStatus < 100 || p.ExpectStatus > 599) {
			return fmt.Errorf("expectStatus: %d (want 100-599, or 0 for any 2xx)", p.ExpectStatus)
		}
	case TCP:
		if p.Address == "" {
			return errors.New("address: required for tcp probes")
		}
		host, port, err := net.SplitHostPort(p.Address)
		if err != nil {
			return fmt.Errorf("address: %w", err)
		}
		if host == "" || port == "" {
			return fmt.Errorf("address: %q (want host:port)", p.Address)
		}
	case Exec:
		if len(p.Command) == 0 {
			return errors.New("command: required for exec probes")
		}
		if p.Command[0] == "" {
			return errors.New("command: empty program name")
		}
	}
	return nil
}

func validateTimes(interval, timeout time.Duration) error {
	switch {
	case interval < MinInterval:
		return fmt.Errorf("interval: %s is below the minimum %s", interval, MinInterval)
	case timeout <= 0:
		return fmt.Errorf("timeout: %s (want > 0)", timeout)
	case timeout > interval:
		return fmt.Errorf("timeout: %s exceeds interval %s", timeout, interval)
	}
	return nil
}

// Result is the latest result of one probe.
type Result struct {
	Name string
	// Ran is false until a run has completed; such a probe counts as
	// passing.
	Ran    bool
	Passed bool
	// Reason says why the last run failed, or "ok".
	Reason string
	// Finished is when the last run ended; Took, how long it ran.
	Finished time.Time
	Took     time.Duration
}

// Runner runs probes and keeps their latest results. Its methods are
// safe for concurrent use.
//
//  1. RunOnce runs every probe and the failed-units check once,
//     concurrently, and returns when all are done. The agent calls it
//     before its first check-in.
//  2. Run runs each on its own interval (the first run at once) until its
//     context ends.
//  3. Summary returns the latest results for a check-in. A probe that has
//     not completed a run yet counts as passing, and the failed units are
//     empty until the check has run.
//  4. Changed delivers a notification after a run changes what Summary
//     returns (the agent then sends a probe_results report). Reasons
//     alone changing do not notify.
//
// A run interrupted because the context passed to Run or RunOnce ended is
// discarded, so stopping the runner never flips a probe to failing. When
// two runs of one probe overlap (Run and RunOnce together), the result of
// the one started later wins.
type Runner struct {
	cfg     Config
	client  *http.Client
	changed chan struct{}

	mu     sync.Mutex
	probes []state // by index into cfg.Probes
	units  state   // the failed-units check
}

type state struct {
	started uint64 // runs started
	applied uint64 // the run whose result is held, numbered as started
	result  Result
	units   []string // failed-units check only: sorted, ignored units removed
}

// NewRunner returns a runner for cfg. It does not validate cfg (see
// Config.Validate); zero intervals and timeouts take the defaults, an
// empty failed-units command the default command.
func NewRunner(cfg Config) *Runner {
	fu := cfg.FailedUnits
	fu.Command = slices.Clone(fu.Command)
	if len(fu.Command) == 0 {
		fu.Command = DefaultFailedUnitsCommand()
	}
	fu.Ignore = slices.Clone(fu.Ignore)
	fu.Interval, fu.Timeout = timesOrDefault(fu.Interval, fu.Timeout)
	r := &Runner{
		cfg: Config{FailedUnits: fu, Probes: make([]Spec, len(cfg.Probes))},
		client: &http.Client{
			Transport: &http.Transport{
				// Health endpoints are local to the host: never through a
				// proxy from the environment, and a fresh connection each
				// time so a kept-alive one cannot hide a dead listener.
				Proxy:             nil,
				DisableKeepAlives: true,
				DialContext:       (&net.Dialer{}).DialContext,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		changed: make(chan struct{}, 1),
		probes:  make([]state, len(cfg.Probes)),
	}
	for i, p := range cfg.Probes {
		p.Command = slices.Clone(p.Command)
		p.Interval, p.Timeout = timesOrDefault(p.Interval, p.Timeout)
		r.cfg.Probes[i] = p
		r.probes[i].result = Result{Name: p.Name, Passed: true, Reason: "not run yet"}
	}
	r.units.result = Result{Name: DetailFailedUnits, Passed: true, Reason: "not run yet"}
	if !fu.Enabled {
		r.units.result.Reason = "disabled"
	}
	return r
}

func timesOrDefault(interval, timeout time.Duration) (time.Duration, time.Duration) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if timeout <= 0 {
		timeout = min(DefaultTimeout, interval)
	}
	return interval, timeout
}

// Changed returns a channel that receives a value after a run changes
// Summary. It has a buffer of one and notifications coalesce: a receiver
// that falls behind gets one notification for several changes, so it
// should read Summary after each receive. A notification is sent before
// the run's RunOnce returns.
func (r *Runner) Changed() <-chan struct{} { return r.changed }

// Summary returns the latest results: Total is the number of configured
// probes, Failed the sorted names of the failing ones, and failedUnits the
// sorted units of the last failed-units run without the ignored ones (or
// ErrorFailedUnits when that run failed). Both slices are non-nil.
func (r *Runner) Summary() (summary proto.ProbeSummary, failedUnits []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.summaryLocked()
}

func (r *Runner) summaryLocked() (proto.ProbeSummary, []string) {
	s := proto.ProbeSummary{Total: len(r.probes), Failed: []string{}}
	for _, p := range r.probes {
		if !p.result.Passed {
			s.Failed = append(s.Failed, p.result.Name)
		}
	}
	slices.Sort(s.Failed)
	return s, append([]string{}, r.units.units...)
}

// Results returns the latest result of every probe, in configuration
// order, followed by the failed-units check's (named
// DetailFailedUnits) when it is enabled.
func (r *Runner) Results() []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Result, 0, len(r.probes)+1)
	for _, p := range r.probes {
		out = append(out, p.result)
	}
	if r.cfg.FailedUnits.Enabled {
		out = append(out, r.units.result)
	}
	return out
}

// Details maps each probe name, and DetailFailedUnits, to the reason
// of its latest result ("ok", "not run yet" or why it failed), for logs.
func (r *Runner) Details() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := make(map[string]string, len(r.probes)+1)
	for _, p := range r.probes {
		d[p.result.Name] = p.result.Reason
	}
	d[DetailFailedUnits] = r.units.result.Reason
	return d
}

// RunOnce runs every probe and the failed-units check once, concurrently,
// and waits for them. If ctx ends first, the interrupted runs are
// discarded.
func (r *Runner) RunOnce(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range r.cfg.Probes {
		wg.Go(func() { r.runProbe(ctx, i) })
	}
	if r.cfg.FailedUnits.Enabled {
		wg.Go(func() { r.runUnits(ctx) })
	}
	wg.Wait()
}

// Run runs each probe, and the failed-units check, on its own interval,
// the first time at once, until ctx ends. It returns when all its runs
// have stopped.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	loop := func(interval time.Duration, run func(context.Context)) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			run(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}
	for i, p := range r.cfg.Probes {
		wg.Go(func() { loop(p.Interval, func(ctx context.Context) { r.runProbe(ctx, i) }) })
	}
	if fu := r.cfg.FailedUnits; fu.Enabled {
		wg.Go(func() { loop(fu.Interval, r.runUnits) })
	}
	wg.Wait()
}

// begin numbers a new run of st.
func (r *Runner) begin(st *state) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	st.started++
	return st.started
}

// finish records the outcome of run number n of st, unless a later run's
// is already held, and notifies Changed if Summary changed.
func (r *Runner) finish(st *state, n uint64, passed bool, reason string, units []string, start time.Time) {
	end := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= st.applied {
		return
	}
	beforeS, beforeU := r.summaryLocked()
	st.applied = n
	st.result.Ran, st.result.Passed, st.result.Reason = true, passed, reason
	st.result.Finished, st.result.Took = end, end.Sub(start)
	if units != nil {
		st.units = units
	}
	afterS, afterU := r.summaryLocked()
	if !slices.Equal(beforeS.Failed, afterS.Failed) || !slices.Equal(beforeU, afterU) {
		select {
		case r.changed <- struct{}{}:
		default: // one is pending already
		}
	}
}

func (r *Runner) runProbe(ctx context.Context, i int) {
	if ctx.Err() != nil {
		return
	}
	p := r.cfg.Probes[i]
	st := &r.probes[i]
	n := r.begin(st)
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	var err error
	switch p.Type {
	case HTTP:
		err = r.checkHTTP(runCtx, p)
	case TCP:
		err = checkTCP(runCtx, p)
	case Exec:
		_, err = runCommand(runCtx, p.Command)
	default:
		err = fmt.Errorf("unknown probe type %q", p.Type)
	}
	if ctx.Err() != nil {
		return // stopping: keep the last real result
	}
	if err != nil && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %s", p.Timeout)
	}
	if err != nil {
		r.finish(st, n, false, shortReason(err), nil, start)
		return
	}
	r.finish(st, n, true, "ok", nil, start)
}

func (r *Runner) checkHTTP(ctx context.Context, p Spec) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "nixfleet-agent-probe")
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	// Drain a little so the server sees a complete exchange; never more.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	_ = resp.Body.Close()
	switch {
	case p.ExpectStatus == 0 && (resp.StatusCode < 200 || resp.StatusCode > 299):
		return fmt.Errorf("status %d (want 2xx)", resp.StatusCode)
	case p.ExpectStatus != 0 && resp.StatusCode != p.ExpectStatus:
		return fmt.Errorf("status %d (want %d)", resp.StatusCode, p.ExpectStatus)
	}
	return nil
}

func checkTCP(ctx context.Context, p Spec) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.Address)
	if err != nil {
		return err
	}
	return c.Close()
}

// runCommand runs argv without a shell, in its own process group that
// is killed when ctx ends, and returns its standard output (capped). A
// non-zero exit is an error that ends with the last line of its standard
// error, or of its output when standard error is empty.
func runCommand(ctx context.Context, argv []string) ([]byte, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	stdout := &output{max: maxOutput}
	stderr := &output{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Kill the whole group, so a probe that forks cannot outlive its
	// timeout, and stop waiting for output a leftover grandchild holds.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	if err := cmd.Run(); err != nil {
		msg := lastLine(stderr.buf)
		if msg == "" {
			msg = lastLine(stdout.buf)
		}
		if msg != "" {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return stdout.buf, nil
}

// output keeps the first max bytes written and drains the rest, so
// the child never blocks on a full pipe. It has no ReadFrom, so os/exec's
// copy goes through Write.
type output struct {
	buf []byte
	max int
}

func (o *output) Write(p []byte) (int, error) {
	if room := o.max - len(o.buf); room > 0 {
		o.buf = append(o.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}

// shortReason turns an error into a short one-line reason.
func shortReason(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > maxReason {
		s = strings.ToValidUTF8(s[:maxReason], "") + "…"
	}
	return s
}

func (r *Runner) runUnits(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	fu := r.cfg.FailedUnits
	st := &r.units
	n := r.begin(st)
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, fu.Timeout)
	defer cancel()
	out, err := runCommand(runCtx, fu.Command)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %s", fu.Timeout)
		}
		r.finish(st, n, false, "failed-units command: "+shortReason(err), []string{ErrorFailedUnits}, start)
		return
	}
	all := ParseFailedUnits(out)
	units := []string{}
	for _, u := range all {
		if !isIgnored(u, fu.Ignore) {
			units = append(units, u)
		}
	}
	reason := fmt.Sprintf("ok: %d failed units", len(units))
	if ignored := len(all) - len(units); ignored > 0 {
		reason += fmt.Sprintf(" (%d more ignored)", ignored)
	}
	r.finish(st, n, true, reason, units, start)
}

func isIgnored(unit string, globs []string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, unit); ok {
			return true
		}
	}
	return false
}

// unitTypes are the suffixes of systemd unit names.
var unitTypes = []string{
	"service", "socket", "device", "mount", "automount", "swap",
	"target", "path", "timer", "slice", "scope",
}

// ParseFailedUnits extracts unit names from output like that of
// `systemctl --failed --plain --no-legend`: on each line, the first
// whitespace-separated field that contains a '.' (which skips a leading
// "●"), kept only when it ends in a systemd unit type (which skips legend
// and summary lines). The result is sorted and without duplicates.
func ParseFailedUnits(out []byte) []string {
	units := []string{}
	for line := range bytes.Lines(out) {
		for _, f := range strings.Fields(string(line)) {
			dot := strings.LastIndexByte(f, '.')
			if dot < 0 {
				continue
			}
			if dot > 0 && slices.Contains(unitTypes, f[dot+1:]) {
				units = append(units, f)
			}
			break
		}
	}
	slices.Sort(units)
	return slices.Compact(units)
}
