package agent

// Health probes (SPEC §7): failed systemd units and http, tcp and exec
// probes, run on their own intervals. Their latest results feed
// proto.CheckinRequest.Probes and FailedUnits, and a probe_results report
// whenever they change.
//
// The probes file (JSON, decoded with proto.Decode: duplicate members and
// type errors refused, unknown members tolerated):
//
//	{
//	  "failedUnits": {"enabled": true,
//	                  "command": ["systemctl", "--failed", "--plain", "--no-legend", "--no-pager"],
//	                  "ignore": ["user@*.service"], "interval": "30s", "timeout": "5s"},
//	  "probes": [
//	    {"name": "web", "type": "http", "url": "http://127.0.0.1:8080/health", "expectStatus": 200,
//	     "interval": "10s", "timeout": "2s"},
//	    {"name": "db", "type": "tcp", "address": "127.0.0.1:5432"},
//	    {"name": "disk", "type": "exec", "command": ["/usr/bin/test", "-w", "/var"]}
//	  ]
//	}

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
	// DefaultProbeInterval is the interval of a probe (and of the
	// failed-units check) whose file entry gives none.
	DefaultProbeInterval = 30 * time.Second
	// DefaultProbeTimeout is the timeout of a probe whose file entry gives
	// none.
	DefaultProbeTimeout = 5 * time.Second
	// MinProbeInterval is the shortest interval a probes file may ask for.
	MinProbeInterval = time.Second

	// ProbeErrorFailedUnits is the pseudo-unit reported in place of the
	// failed units when the failed-units command itself fails (cannot
	// start, exits non-zero, times out), so a broken check shows up as
	// unhealthy rather than as a host without failed units.
	ProbeErrorFailedUnits = "nixfleet-probe-error:failed-units"
	// ProbeDetailFailedUnits is the key of the failed-units check in
	// ProbeRunner.Details. Probe names cannot contain '@', so it never
	// collides with a probe.
	ProbeDetailFailedUnits = "@failed-units"

	// maxProbeBody caps how much of an http probe's response body is read.
	maxProbeBody = 64 << 10
	// maxProbeOutput caps how much output of an exec probe or of the
	// failed-units command is kept.
	maxProbeOutput = 1 << 20
	// maxProbeReason caps the length of a result's reason.
	maxProbeReason = 256
	// probeWaitDelay bounds how long a killed command's leftover children
	// may hold its output open.
	probeWaitDelay = time.Second
)

// DefaultFailedUnitsCommand returns the command that lists failed systemd
// units when the probes file names none.
func DefaultFailedUnitsCommand() []string {
	return []string{"systemctl", "--failed", "--plain", "--no-legend", "--no-pager"}
}

// ErrProbeConfig is wrapped by every validation error of LoadProbes,
// ParseProbes and ProbeConfig.Validate. Decoding errors wrap
// proto.ErrMalformed instead; a missing file, fs.ErrNotExist.
var ErrProbeConfig = errors.New("invalid probe config")

// ProbeType is the kind of a probe.
type ProbeType string

// Probe types.
const (
	// ProbeHTTP passes when a GET of URL answers with the expected status.
	ProbeHTTP ProbeType = "http"
	// ProbeTCP passes when a TCP connection to Address opens.
	ProbeTCP ProbeType = "tcp"
	// ProbeExec passes when Command exits 0.
	ProbeExec ProbeType = "exec"
)

// ProbeSpec is one configured probe.
type ProbeSpec struct {
	// Name identifies the probe in reports: non-empty, [A-Za-z0-9._-]+,
	// unique within a config.
	Name string
	Type ProbeType
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
	// each run. NewProbeRunner replaces zero values with the defaults.
	Interval time.Duration
	Timeout  time.Duration
}

// ProbeFailedUnits configures the failed-units check.
type ProbeFailedUnits struct {
	Enabled bool
	// Command prints the failed units, one per line, as
	// DefaultFailedUnitsCommand does. Empty means the default.
	Command []string
	// Ignore lists path.Match patterns; matching units are not reported.
	Ignore []string
	// Interval and Timeout work as in ProbeSpec.
	Interval time.Duration
	Timeout  time.Duration
}

// ProbeConfig is the agent's probes configuration.
type ProbeConfig struct {
	FailedUnits ProbeFailedUnits
	Probes      []ProbeSpec
}

// DefaultProbeConfig is the configuration without a probes file: no
// probes, and the failed-units check enabled with the default command.
func DefaultProbeConfig() ProbeConfig {
	return ProbeConfig{FailedUnits: ProbeFailedUnits{
		Enabled:  true,
		Command:  DefaultFailedUnitsCommand(),
		Interval: DefaultProbeInterval,
		Timeout:  DefaultProbeTimeout,
	}}
}

// LoadProbes reads and validates the probes file at path. An empty path
// means DefaultProbeConfig; a path that does not exist is an error
// (wrapping fs.ErrNotExist).
func LoadProbes(path string) (ProbeConfig, error) {
	if path == "" {
		return DefaultProbeConfig(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ProbeConfig{}, fmt.Errorf("read probes file: %w", err)
	}
	cfg, err := ParseProbes(data)
	if err != nil {
		return ProbeConfig{}, fmt.Errorf("probes file %s: %w", path, err)
	}
	return cfg, nil
}

// probeFile is the JSON form of a probes file.
type probeFile struct {
	FailedUnits *probeFileFailedUnits `json:"failedUnits"`
	Probes      []probeFileSpec       `json:"probes"`
}

type probeFileFailedUnits struct {
	// Enabled absent or null means true.
	Enabled  *bool    `json:"enabled"`
	Command  []string `json:"command"`
	Ignore   []string `json:"ignore"`
	Interval string   `json:"interval"`
	Timeout  string   `json:"timeout"`
}

type probeFileSpec struct {
	Name         string   `json:"name"`
	Type         string   `json:"type"`
	URL          string   `json:"url"`
	ExpectStatus int      `json:"expectStatus"`
	Address      string   `json:"address"`
	Command      []string `json:"command"`
	Interval     string   `json:"interval"`
	Timeout      string   `json:"timeout"`
}

// ParseProbes decodes and validates the bytes of a probes file. A missing
// failedUnits member means the default check; defaults fill absent
// intervals and timeouts.
func ParseProbes(data []byte) (ProbeConfig, error) {
	var f probeFile
	if err := proto.Decode(data, &f); err != nil {
		return ProbeConfig{}, err
	}
	cfg := DefaultProbeConfig()
	if fu := f.FailedUnits; fu != nil {
		cfg.FailedUnits.Enabled = fu.Enabled == nil || *fu.Enabled
		if len(fu.Command) > 0 {
			cfg.FailedUnits.Command = fu.Command
		}
		cfg.FailedUnits.Ignore = fu.Ignore
		var err error
		if cfg.FailedUnits.Interval, cfg.FailedUnits.Timeout, err = parseProbeTimes(fu.Interval, fu.Timeout); err != nil {
			return ProbeConfig{}, fmt.Errorf("%w: failedUnits: %w", ErrProbeConfig, err)
		}
	}
	for i, p := range f.Probes {
		s := ProbeSpec{
			Name: p.Name, Type: ProbeType(p.Type), URL: p.URL, ExpectStatus: p.ExpectStatus,
			Address: p.Address, Command: p.Command,
		}
		var err error
		if s.Interval, s.Timeout, err = parseProbeTimes(p.Interval, p.Timeout); err != nil {
			return ProbeConfig{}, fmt.Errorf("%w: %s: %w", ErrProbeConfig, probeLabel(i, p.Name), err)
		}
		cfg.Probes = append(cfg.Probes, s)
	}
	if err := cfg.Validate(); err != nil {
		return ProbeConfig{}, err
	}
	return cfg, nil
}

func parseProbeTimes(interval, timeout string) (time.Duration, time.Duration, error) {
	i, t := DefaultProbeInterval, DefaultProbeTimeout
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

// probeLabel names a probe in errors, by position when it has no name.
func probeLabel(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("probes[%d]", i)
	}
	return fmt.Sprintf("probe %q", name)
}

// Validate checks a configuration as LoadProbes does: every error wraps
// ErrProbeConfig and names the probe (or probes[i] when it has no name)
// and the field. NewProbeRunner does not call it, so tests may use
// intervals below MinProbeInterval.
func (c ProbeConfig) Validate() error {
	if fu := c.FailedUnits; fu.Enabled {
		if err := validateProbeTimes(fu.Interval, fu.Timeout); err != nil {
			return fmt.Errorf("%w: failedUnits: %w", ErrProbeConfig, err)
		}
		if len(fu.Command) > 0 && fu.Command[0] == "" {
			return fmt.Errorf("%w: failedUnits: command: empty program name", ErrProbeConfig)
		}
		for _, g := range fu.Ignore {
			if _, err := path.Match(g, ""); err != nil {
				return fmt.Errorf("%w: failedUnits: ignore pattern %q: %w", ErrProbeConfig, g, err)
			}
		}
	}
	seen := make(map[string]bool, len(c.Probes))
	for i, p := range c.Probes {
		if err := validateProbe(p); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrProbeConfig, probeLabel(i, p.Name), err)
		}
		if seen[p.Name] {
			return fmt.Errorf("%w: %s: duplicate name", ErrProbeConfig, probeLabel(i, p.Name))
		}
		seen[p.Name] = true
	}
	return nil
}

func validateProbe(p ProbeSpec) error {
	if p.Name == "" {
		return errors.New("name: empty")
	}
	for _, r := range p.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("name: %q not allowed (want [A-Za-z0-9._-]+)", r)
		}
	}
	if err := validateProbeTimes(p.Interval, p.Timeout); err != nil {
		return err
	}
	switch p.Type {
	case ProbeHTTP, ProbeTCP, ProbeExec:
	case "":
		return errors.New("type: required (http, tcp or exec)")
	default:
		return fmt.Errorf("type: unknown %q (want http, tcp or exec)", p.Type)
	}
	// Fields of another type are refused: they are likely a mistake.
	for _, f := range []struct {
		field string
		set   bool
		typ   ProbeType
	}{
		{"url", p.URL != "", ProbeHTTP},
		{"expectStatus", p.ExpectStatus != 0, ProbeHTTP},
		{"address", p.Address != "", ProbeTCP},
		{"command", len(p.Command) > 0, ProbeExec},
	} {
		if f.set && p.Type != f.typ {
			return fmt.Errorf("%s: only for %s probes, not %s", f.field, f.typ, p.Type)
		}
	}
	switch p.Type {
	case ProbeHTTP:
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
	case ProbeTCP:
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
	case ProbeExec:
		if len(p.Command) == 0 {
			return errors.New("command: required for exec probes")
		}
		if p.Command[0] == "" {
			return errors.New("command: empty program name")
		}
	}
	return nil
}

func validateProbeTimes(interval, timeout time.Duration) error {
	switch {
	case interval < MinProbeInterval:
		return fmt.Errorf("interval: %s is below the minimum %s", interval, MinProbeInterval)
	case timeout <= 0:
		return fmt.Errorf("timeout: %s (want > 0)", timeout)
	case timeout > interval:
		return fmt.Errorf("timeout: %s exceeds interval %s", timeout, interval)
	}
	return nil
}

// ProbeResult is the latest result of one probe.
type ProbeResult struct {
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

// ProbeRunner runs probes and keeps their latest results. Its methods are
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
type ProbeRunner struct {
	cfg     ProbeConfig
	client  *http.Client
	changed chan struct{}

	mu     sync.Mutex
	probes []probeState // by index into cfg.Probes
	units  probeState   // the failed-units check
}

type probeState struct {
	started uint64 // runs started
	applied uint64 // the run whose result is held, numbered as started
	result  ProbeResult
	units   []string // failed-units check only: sorted, ignored units removed
}

// NewProbeRunner returns a runner for cfg. It does not validate cfg (see
// ProbeConfig.Validate); zero intervals and timeouts take the defaults, an
// empty failed-units command the default command.
func NewProbeRunner(cfg ProbeConfig) *ProbeRunner {
	fu := cfg.FailedUnits
	fu.Command = slices.Clone(fu.Command)
	if len(fu.Command) == 0 {
		fu.Command = DefaultFailedUnitsCommand()
	}
	fu.Ignore = slices.Clone(fu.Ignore)
	fu.Interval, fu.Timeout = probeTimesOrDefault(fu.Interval, fu.Timeout)
	r := &ProbeRunner{
		cfg: ProbeConfig{FailedUnits: fu, Probes: make([]ProbeSpec, len(cfg.Probes))},
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
		probes:  make([]probeState, len(cfg.Probes)),
	}
	for i, p := range cfg.Probes {
		p.Command = slices.Clone(p.Command)
		p.Interval, p.Timeout = probeTimesOrDefault(p.Interval, p.Timeout)
		r.cfg.Probes[i] = p
		r.probes[i].result = ProbeResult{Name: p.Name, Passed: true, Reason: "not run yet"}
	}
	r.units.result = ProbeResult{Name: ProbeDetailFailedUnits, Passed: true, Reason: "not run yet"}
	if !fu.Enabled {
		r.units.result.Reason = "disabled"
	}
	return r
}

func probeTimesOrDefault(interval, timeout time.Duration) (time.Duration, time.Duration) {
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	if timeout <= 0 {
		timeout = min(DefaultProbeTimeout, interval)
	}
	return interval, timeout
}

// Changed returns a channel that receives a value after a run changes
// Summary. It has a buffer of one and notifications coalesce: a receiver
// that falls behind gets one notification for several changes, so it
// should read Summary after each receive. A notification is sent before
// the run's RunOnce returns.
func (r *ProbeRunner) Changed() <-chan struct{} { return r.changed }

// Summary returns the latest results: Total is the number of configured
// probes, Failed the sorted names of the failing ones, and failedUnits the
// sorted units of the last failed-units run without the ignored ones (or
// ProbeErrorFailedUnits when that run failed). Both slices are non-nil.
func (r *ProbeRunner) Summary() (summary proto.ProbeSummary, failedUnits []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.summaryLocked()
}

func (r *ProbeRunner) summaryLocked() (proto.ProbeSummary, []string) {
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
// ProbeDetailFailedUnits) when it is enabled.
func (r *ProbeRunner) Results() []ProbeResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ProbeResult, 0, len(r.probes)+1)
	for _, p := range r.probes {
		out = append(out, p.result)
	}
	if r.cfg.FailedUnits.Enabled {
		out = append(out, r.units.result)
	}
	return out
}

// Details maps each probe name, and ProbeDetailFailedUnits, to the reason
// of its latest result ("ok", "not run yet" or why it failed), for logs.
func (r *ProbeRunner) Details() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := make(map[string]string, len(r.probes)+1)
	for _, p := range r.probes {
		d[p.result.Name] = p.result.Reason
	}
	d[ProbeDetailFailedUnits] = r.units.result.Reason
	return d
}

// RunOnce runs every probe and the failed-units check once, concurrently,
// and waits for them. If ctx ends first, the interrupted runs are
// discarded.
func (r *ProbeRunner) RunOnce(ctx context.Context) {
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
func (r *ProbeRunner) Run(ctx context.Context) {
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
func (r *ProbeRunner) begin(st *probeState) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	st.started++
	return st.started
}

// finish records the outcome of run number n of st, unless a later run's
// is already held, and notifies Changed if Summary changed.
func (r *ProbeRunner) finish(st *probeState, n uint64, passed bool, reason string, units []string, start time.Time) {
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

func (r *ProbeRunner) runProbe(ctx context.Context, i int) {
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
	case ProbeHTTP:
		err = r.checkHTTP(runCtx, p)
	case ProbeTCP:
		err = probeCheckTCP(runCtx, p)
	case ProbeExec:
		_, err = runProbeCommand(runCtx, p.Command)
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
		r.finish(st, n, false, probeReason(err), nil, start)
		return
	}
	r.finish(st, n, true, "ok", nil, start)
}

func (r *ProbeRunner) checkHTTP(ctx context.Context, p ProbeSpec) error {
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
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBody))
	_ = resp.Body.Close()
	switch {
	case p.ExpectStatus == 0 && (resp.StatusCode < 200 || resp.StatusCode > 299):
		return fmt.Errorf("status %d (want 2xx)", resp.StatusCode)
	case p.ExpectStatus != 0 && resp.StatusCode != p.ExpectStatus:
		return fmt.Errorf("status %d (want %d)", resp.StatusCode, p.ExpectStatus)
	}
	return nil
}

func probeCheckTCP(ctx context.Context, p ProbeSpec) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.Address)
	if err != nil {
		return err
	}
	return c.Close()
}

// runProbeCommand runs argv without a shell, in its own process group that
// is killed when ctx ends, and returns its standard output (capped). A
// non-zero exit is an error that ends with the last line of its standard
// error, or of its output when standard error is empty.
func runProbeCommand(ctx context.Context, argv []string) ([]byte, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	stdout := &probeOutput{max: maxProbeOutput}
	stderr := &probeOutput{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Kill the whole group, so a probe that forks cannot outlive its
	// timeout, and stop waiting for output a leftover grandchild holds.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = probeWaitDelay
	if err := cmd.Run(); err != nil {
		msg := lastProbeLine(stderr.buf)
		if msg == "" {
			msg = lastProbeLine(stdout.buf)
		}
		if msg != "" {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return stdout.buf, nil
}

// probeOutput keeps the first max bytes written and drains the rest, so
// the child never blocks on a full pipe. It has no ReadFrom, so os/exec's
// copy goes through Write.
type probeOutput struct {
	buf []byte
	max int
}

func (o *probeOutput) Write(p []byte) (int, error) {
	if room := o.max - len(o.buf); room > 0 {
		o.buf = append(o.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func lastProbeLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}

// probeReason turns an error into a short one-line reason.
func probeReason(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > maxProbeReason {
		s = strings.ToValidUTF8(s[:maxProbeReason], "") + "…"
	}
	return s
}

func (r *ProbeRunner) runUnits(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	fu := r.cfg.FailedUnits
	st := &r.units
	n := r.begin(st)
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, fu.Timeout)
	defer cancel()
	out, err := runProbeCommand(runCtx, fu.Command)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("timed out after %s", fu.Timeout)
		}
		r.finish(st, n, false, "failed-units command: "+probeReason(err), []string{ProbeErrorFailedUnits}, start)
		return
	}
	all := ParseFailedUnits(out)
	units := []string{}
	for _, u := range all {
		if !probeIgnored(u, fu.Ignore) {
			units = append(units, u)
		}
	}
	reason := fmt.Sprintf("ok: %d failed units", len(units))
	if ignored := len(all) - len(units); ignored > 0 {
		reason += fmt.Sprintf(" (%d more ignored)", ignored)
	}
	r.finish(st, n, true, reason, units, start)
}

func probeIgnored(unit string, globs []string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, unit); ok {
			return true
		}
	}
	return false
}

// probeUnitTypes are the suffixes of systemd unit names.
var probeUnitTypes = []string{
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
			if dot > 0 && slices.Contains(probeUnitTypes, f[dot+1:]) {
				units = append(units, f)
			}
			break
		}
	}
	slices.Sort(units)
	return slices.Compact(units)
}
