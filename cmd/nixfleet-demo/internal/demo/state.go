package demo

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
)

// stateFile is what a demo kept running (--keep) writes into its
// directory for `nixfleet-demo push` and `promote`, which run in other
// processes: where its control plane listens, where CI's key and the
// fleet repository are, and which release comes next. Only those
// commands write it after that, one at a time.
const stateFile = "demo.json"

// DirEnv names the directory of the demo that push and promote act on
// when --dir is not given.
const DirEnv = "NIXFLEET_DEMO_DIR"

type state struct {
	// PID is the process that keeps the demo running.
	PID int    `json:"pid"`
	URL string `json:"url"`
	// Config and ApproverConfig are the operator configurations of the
	// demo's operator and approver (NIXFLEET_CONFIG).
	Config         string `json:"config"`
	ApproverConfig string `json:"approverConfig"`
	// Next is the number of the next release: v<Next>.
	Next int `json:"next"`
	// Latest is the version last signed, and LastSigned its signedAt: a
	// channel takes only a release signed strictly later.
	Latest     string    `json:"latest"`
	LastSigned time.Time `json:"lastSigned"`
}

// Files of a demo's directory that push and promote read.
const (
	ciKeyFile       = "ci_key.pem"
	operatorKeyFile = "operator_key"
	approverKeyFile = "approver_key"
)

// writeState writes the state file atomically.
func writeState(dir string, st state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+stateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// findDemo returns the directory of the running demo to act on: dir when
// given, else $NIXFLEET_DEMO_DIR, else the newest demo kept running in
// the temporary directory. The demo's process must still run.
func findDemo(dir string) (string, state, error) {
	hint := "start one with 'nixfleet-demo --keep' and run this in another terminal; --dir DIR (or NIXFLEET_DEMO_DIR) names its directory"
	if dir == "" {
		dir = os.Getenv(DirEnv)
	}
	if dir == "" {
		found, _ := filepath.Glob(filepath.Join(os.TempDir(), "nixfleet-demo-*", stateFile))
		var newest time.Time
		for _, f := range found {
			fi, err := os.Stat(f)
			st, rerr := readState(filepath.Dir(f))
			if err != nil || rerr != nil || !alive(st.PID) {
				continue
			}
			if fi.ModTime().After(newest) {
				newest, dir = fi.ModTime(), filepath.Dir(f)
			}
		}
		if dir == "" {
			return "", state{}, &Error{Code: codes.NotFound, Hint: hint,
				Err: fmt.Errorf("no demo kept running (--keep) was found in %s", os.TempDir())}
		}
	}
	st, err := readState(dir)
	if err != nil {
		return "", state{}, &Error{Code: codes.NotFound, Hint: hint, Err: err}
	}
	if !alive(st.PID) {
		return "", state{}, &Error{Code: codes.NotFound, Hint: hint,
			Err: fmt.Errorf("the demo of %s (process %d) is no longer running", dir, st.PID)}
	}
	return dir, st, nil
}

func readState(dir string) (state, error) {
	var st state
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("%s is not the directory of a demo kept running (no %s)", dir, stateFile)
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	return st, nil
}

// alive reports whether process pid runs.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// operatorClient is a client of the demo's control plane with the key of
// one of its operators (operatorKeyFile or approverKeyFile).
func operatorClient(dir string, st state, keyFile, name string) (*apiclient.Client, error) {
	b, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err != nil {
		return nil, err
	}
	raw, err := ssh.ParseRawPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	key, ok := raw.(*ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ed25519 key", keyFile)
	}
	pem, err := os.ReadFile(filepath.Join(dir, "cert.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("cert.pem holds no certificate")
	}
	return apiclient.New(st.URL, apiclient.Options{Key: *key, Name: name, ServerCAs: pool, Timeout: 20 * time.Second})
}

// pushedVersion names the version a demo release's ciCommit was made
// from, among those push makes (v3 on), or "" when it is none of them.
func pushedVersion(ref string) string {
	for n := range 1000 {
		for _, v := range []string{version(n, false), version(n, true)} {
			if commitOf(v) == ref {
				return v
			}
		}
	}
	return ""
}

// version is the name of release number n: "v3", or "v4-bad" for a
// release whose hosts fail their health probe (push --bad).
func version(n int, bad bool) string {
	v := fmt.Sprintf("v%d", n)
	if bad {
		v += badSuffix
	}
	return v
}

// badSuffix marks the versions of bad releases: the demo's simulated
// services fail on any closure of such a version, as on v2.
const badSuffix = "-bad"
