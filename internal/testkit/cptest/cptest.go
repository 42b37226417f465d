// Package cptest holds what the tests that run a control plane inside the
// test process share: the clock they give it and its simulated hosts, and
// the two things CI and the forge do to it, publishing a release in the
// fleet repository and calling the git webhook.
//
// It does not import the control plane, so that the control plane's own
// tests may use it as well as the CLI's.
package cptest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
)

// Clock is a test clock for a control plane and its simulated hosts. Its
// readings move only when told to, plus a millisecond at every reading, so
// that no two readings are equal: a check-in after a tick is later than
// the tick, as with a real clock. Its tickers and timers are real ones:
// the control plane's loops keep turning while the fleet's time is held.
// It is safe for concurrent use.
type Clock struct {
	clock.Real // tickers and timers
	mu         sync.Mutex
	now        time.Time
}

// NewClock returns a clock that reads start (plus a millisecond) first.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now moves the clock on by a millisecond and returns the new time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// Since is Now().Sub(t).
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Release does what CI does for release number n: it commits the spec's
// fleet at version, signed at signedAt, with ciCommit fleetkit.Commit(n),
// and moves every channel of the spec to that commit.
func Release(repo *fleetrepo.Repo, spec fleetrepo.Spec, version string, n int, signedAt time.Time) error {
	unsigned, err := spec.Fleet(version)
	if err != nil {
		return err
	}
	commit, err := repo.Release(unsigned, fleetkit.Commit(n), signedAt)
	if err != nil {
		return err
	}
	for ch := range spec.Channels {
		if err := repo.Promote(ch, commit); err != nil {
			return err
		}
	}
	return nil
}

// HookSignature is the X-Hub-Signature-256 header value of a webhook body
// signed with secret: "sha256=" and the body's HMAC-SHA256 in hexadecimal.
func HookSignature(body []byte, secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Hook calls the git webhook of the control plane at baseURL as a forge
// does after a push to channels/stable, signed with secret; roots are the
// certificate authorities that the server's certificate must chain to.
// Any answer but 202 Accepted is an error.
func Hook(baseURL, secret string, roots *x509.CertPool) error {
	body := []byte(`{"ref":"refs/heads/channels/stable"}`)
	req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/hooks/git", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-Hub-Signature-256", HookSignature(body, secret))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("webhook: HTTP %d", resp.StatusCode)
	}
	return nil
}
