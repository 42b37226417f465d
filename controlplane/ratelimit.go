package controlplane

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/nixfleet/nixfleet/codes"
)

// Rate limits (rfcs/0006 §Rate limits): every request but the probes
// (/healthz, /readyz, /metrics) takes a token from a bucket. A client the
// key of its TLS certificate identifies (a host, an operator) has a bucket
// of its own; any other request (no certificate, a key nobody has, the
// webhook) takes one from its source address's bucket. An empty bucket is
// 429 rate_limited with Retry-After, before the request is read.

// Defaults of nixfleet-cp's --rate-limit-* flags. A real agent sends less
// than one request per second in the long run (a long-poll every 30 s, a
// handful of requests around an activation, a probe report when a probe
// changes); ten per second with a burst of a hundred leaves it ten times
// that and a whole activation plus a reconnection at once, and still
// serves a runaway host 650 times less than the 6,500 per second it sent.
// Requests that carry no known key are failures (401), webhooks, or
// unknown paths: two per second and a burst of twenty per address.
const (
	DefaultRatePerHost      = 10.0
	DefaultRateHostBurst    = 100
	DefaultRatePerAddress   = 2.0
	DefaultRateAddressBurst = 20
)

// maxAddressBuckets caps the per-address table: about 200 bytes each with
// the map and the key, 12.5 MiB at most. When it is full and no bucket in
// it is idle, new addresses share one bucket (a flood from many addresses
// is limited as one).
const maxAddressBuckets = 1 << 16

// RateLimit configures the rate limits. A rate of 0 turns its limit off;
// the zero RateLimit serves without limits (cmd/nixfleet-cp sets the
// Default… values).
type RateLimit struct {
	// PerHost is how many requests per second each identified client (each
	// host, each operator) may send in the long run; HostBurst how many at
	// once.
	PerHost   float64
	HostBurst int
	// PerAddress and AddressBurst are the same for each source address
	// (IPv4 address, IPv6 /64), for requests that carry no known key.
	PerAddress   float64
	AddressBurst int
}

// Check refuses negative or non-finite rates, and a burst under 1 where
// the rate is set.
func (r RateLimit) Check() error {
	for _, l := range []struct {
		name  string
		rate  float64
		burst int
	}{{"per host", r.PerHost, r.HostBurst}, {"per address", r.PerAddress, r.AddressBurst}} {
		switch {
		case l.rate < 0 || math.IsNaN(l.rate) || math.IsInf(l.rate, 0):
			return fmt.Errorf("rate limit %s: %v requests per second, want 0 (off) or more", l.name, l.rate)
		case l.rate > 0 && l.burst < 1:
			return fmt.Errorf("rate limit %s: burst %d, want at least 1", l.name, l.burst)
		}
	}
	return nil
}

// bucket is one key's token bucket, and when the log last heard of it.
type bucket struct {
	*rate.Limiter
	warned time.Time
}

// Sweeps of a limiter's table: one a minute, and, when the table is full,
// at most one a second.
const (
	sweepEvery     = time.Minute
	sweepFullEvery = time.Second
)

// limiter is a table of token buckets by key, under one mutex: each holds
// up to burst tokens, gains rate tokens a second, and every request
// admitted takes one. Buckets that filled up again are dropped by sweeps; a
// capped table that is full sends new keys to one shared overflow bucket.
// Every call into x/time/rate passes the time of l.now.
type limiter struct {
	rate  rate.Limit
	burst int
	max   int // most buckets kept; 0: no cap
	now   func() time.Time

	mu       sync.Mutex
	buckets  map[string]*bucket
	overflow bucket
	swept    time.Time
}

// newLimiter returns a limiter, or nil (no limit) when r is 0.
func newLimiter(r float64, burst, max int, now func() time.Time) *limiter {
	if r <= 0 {
		return nil
	}
	return &limiter{rate: rate.Limit(r), burst: burst, max: max, now: now, buckets: map[string]*bucket{},
		overflow: bucket{Limiter: rate.NewLimiter(rate.Limit(r), burst)}, swept: now()}
}

// take admits a request of key, or returns how long until it would be
// admitted; a refused request takes nothing. warn is set at most once a
// minute per bucket, for the log.
func (l *limiter) take(key string) (wait time.Duration, warn bool) {
	if l == nil {
		return 0, false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) >= sweepEvery {
		l.sweep(now)
	}
	b, ok := l.buckets[key]
	if !ok {
		if l.max > 0 && len(l.buckets) >= l.max && now.Sub(l.swept) >= sweepFullEvery {
			l.sweep(now)
		}
		if l.max > 0 && len(l.buckets) >= l.max {
			b = &l.overflow
		} else {
			b = &bucket{Limiter: rate.NewLimiter(l.rate, l.burst)}
			l.buckets[key] = b
		}
	}
	if b.AllowN(now, 1) {
		return 0, false
	}
	// Refused, so nothing was taken: wait until the missing part of a
	// token is back, rounded up to the nanosecond.
	wait = time.Duration(max(math.Ceil((1-b.TokensAt(now))/float64(l.rate)*float64(time.Second)), 1))
	if now.Sub(b.warned) >= time.Minute {
		b.warned, warn = now, true
	}
	return wait, warn
}

// sweep drops the buckets that are full again: they are no different from
// new ones.
func (l *limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
	l.swept = now
}

// size is the number of buckets kept, for tests.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// addressKey is the bucket of a source address: the IPv4 address, or the
// /64 of an IPv6 address (one site gets a whole /64, and would otherwise
// have 2^64 buckets).
func addressKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// Kinds of rate-limited clients, the label of nixfleet_rate_limited_total.
const (
	limitHost     = "host"
	limitOperator = "operator"
	limitAddress  = "address"
)

// rateLimits are a replica's limiters: one for identified clients, one for
// addresses. Nil limiters (and nil rateLimits) admit everything.
type rateLimits struct {
	clients   *limiter
	addresses *limiter
	m         *metrics
	warn      func(msg string, args ...any)
}

// newRateLimits returns the limits of cfg on the real clock: they bound
// real load, whatever clock the replica decides with. --insecure-dev
// identifies nobody, so it has no limits.
func newRateLimits(cfg Config, m *metrics, warn func(string, ...any)) *rateLimits {
	if cfg.InsecureDev {
		return nil
	}
	r := cfg.RateLimit
	return &rateLimits{
		clients:   newLimiter(r.PerHost, r.HostBurst, 0, time.Now), // bounded by the fleet and the operators file
		addresses: newLimiter(r.PerAddress, r.AddressBurst, maxAddressBuckets, time.Now),
		m:         m, warn: warn,
	}
}

// admit takes a token for a request from its client's bucket (c, when
// identified) or its address's. An empty bucket is 429 rate_limited, with
// Retry-After set on w.
func (l *rateLimits) admit(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if l == nil {
		return nil
	}
	kind, who, lim := limitAddress, addressKey(r.RemoteAddr), l.addresses
	switch {
	case c.host != "":
		kind, who, lim = limitHost, c.host, l.clients
	case c.operator != nil:
		kind, who, lim = limitOperator, c.operator.Name, l.clients
	}
	wait, warn := lim.take(kind + " " + who)
	if wait == 0 {
		return nil
	}
	secs := retryAfterSeconds(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	l.m.rateLimited.WithLabelValues(kind).Inc()
	if warn && l.warn != nil {
		l.warn("rate limiting a client", "kind", kind, "client", who, "retryAfterSeconds", secs)
	}
	return codes.Errorf(codes.RateLimited, "too many requests from %s %s; retry after %d s", kind, who, secs)
}

// retryAfterSeconds is a wait in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
