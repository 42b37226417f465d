package controlplane_test

// CI's part of BenchmarkScale's trials, in a process of its own.
//
// In production CI signs on its own machine; the control plane only reads
// what it committed. Signing 100,000 hosts takes seconds of CPU and
// leaves hundreds of megabytes of garbage: done in the benchmark's
// process, that garbage would be collected by the control plane's
// collector, during the push→dispatch window it measures. The CI process
// is this test binary started again as TestBenchCIProcess (childProc): it
// builds scaleSpec's fleet itself (the host keys derive from their names,
// benchKey), signs it with CI's key, and commits it into the fleet
// repository; the parent moves the channel's ref and calls the webhook,
// as the forge would.

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/trust"
)

// ciEnvVar tells the test binary it runs as the CI process.
const ciEnvVar = "NIXFLEET_BENCH_CI"

// ciConfig is the CI process's first input.
type ciConfig struct {
	// Dir is the fleet repository; Key CI's private key (PKCS#8 PEM).
	Dir string `json:"dir"`
	Key []byte `json:"key"`
	// Hosts is the size of scaleSpec's fleet.
	Hosts int `json:"hosts"`
}

// ciRelease asks for a release: the fleet at Version, with Channels'
// soaks, signed at Now as CI commit fleetkit.Commit(Release).
type ciRelease struct {
	Version  string           `json:"version"`
	Release  int              `json:"release"`
	Now      time.Time        `json:"now"`
	Channels map[string][]int `json:"channels"`
}

// ciResult is the commit made, or why none was.
type ciResult struct {
	Commit string `json:"commit"`
	Error  string `json:"error,omitempty"`
}

// TestBenchCIProcess is the CI process when ciEnvVar is set, and nothing
// otherwise.
func TestBenchCIProcess(t *testing.T) { serveAsChild(ciEnvVar, "CI process", serveCI) }

// serveCI reads a ciConfig, then makes a release for each ciRelease until
// in ends.
func serveCI(in io.Reader, out io.Writer) error {
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	var cfg ciConfig
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("reading the configuration: %w", err)
	}
	key, err := trust.ParsePrivateKey(cfg.Key)
	if err != nil {
		return err
	}
	repo, err := fleetrepo.Open(cfg.Dir, key)
	if err != nil {
		return err
	}
	var spec fleetrepo.Spec // built at the first release, not while the hosts onboard
	for {
		var req ciRelease
		if err := dec.Decode(&req); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if spec.Hosts == nil {
			spec = scaleSpec(cfg.Hosts)
		}
		spec.Channels = req.Channels
		var res ciResult
		unsigned, err := spec.Fleet(req.Version)
		if err == nil {
			h, rerr := repo.Release(unsigned, fleetkit.Commit(req.Release), req.Now)
			res.Commit, err = h.String(), rerr
		}
		if err != nil {
			res.Error = err.Error()
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
}

// startCI starts the CI process on e's repository, for scaleSpec(hosts).
func startCI(tb testing.TB, e *env, hosts int) *childProc {
	tb.Helper()
	pem, err := e.repo.Key.MarshalPKCS8PEM()
	if err != nil {
		tb.Fatal(err)
	}
	return startChild(tb, "CI process", "TestBenchCIProcess", ciEnvVar, ciConfig{Dir: e.repo.Dir, Key: pem, Hosts: hosts})
}
