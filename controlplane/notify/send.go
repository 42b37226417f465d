package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// client makes the HTTP client of a sink: its timeout and CAs, the
// environment's proxy, and no redirects (a redirected POST is a failure:
// the sink's URL is wrong).
func client(s Sink) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: s.RootCAs, MinVersion: tls.VersionTLS12}
	tr.MaxIdleConnsPerHost = 1
	return &http.Client{Transport: tr, Timeout: s.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// outcome is what one POST came to.
type outcome struct {
	// status is the answer's HTTP status, 0 when there was none.
	status int
	// err says why it failed (nil: delivered).
	err error
	// retryAfter is the Retry-After of a 429 or 503 answer (0: none).
	retryAfter time.Duration
}

// maxAnswer bounds what of an answer's body is read (for the log; the
// rest is drained up to drainAnswer, so that the connection is reused).
const (
	maxAnswer   = 512
	drainAnswer = 64 << 10
)

// post sends one body. ctx bounds nothing but the request's values: the
// POST runs to its answer or the sink's timeout even when ctx ends, so
// that a shutting-down control plane finishes it and records it.
func post(ctx context.Context, hc *http.Client, s Sink, userAgent string, eventID int64, body []byte, now time.Time) outcome {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("X-Nixfleet-Delivery", DeliveryID(s.Name, eventID))
	req.Header.Set("X-Nixfleet-Event-Id", strconv.FormatInt(eventID, 10))
	if len(s.Secret) > 0 {
		req.Header.Set("X-Nixfleet-Signature", Signature(s.Secret, body))
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) { // the log names the sink, not its URL (which may hold a token)
			err = ue.Err
		}
		return outcome{err: err}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainAnswer))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return outcome{status: resp.StatusCode}
	}
	o := outcome{status: resp.StatusCode, err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, oneLine(strings.TrimSpace(string(answer))))}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		o.retryAfter = RetryAfter(resp.Header.Get("Retry-After"), now)
	}
	return o
}

// RetryAfter reads a Retry-After header: whole seconds, or an HTTP date
// (from now); 0 when there is none or it is malformed or past.
func RetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(MaxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}
