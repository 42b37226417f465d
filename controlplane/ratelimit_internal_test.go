package controlplane

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
)

// fakeClock moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

var limitEpoch = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// TestBucket drives one key's token bucket through sequences of requests:
// after each pause, the waits the limiter answers (0: admitted).
func TestBucket(t *testing.T) {
	t.Parallel()
	type step struct {
		after time.Duration
		n     int // requests at that time
		want  []time.Duration
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{"a full bucket admits a burst, then waits for a token", 2, 3, []step{
			{0, 5, []time.Duration{0, 0, 0, 500 * ms, 500 * ms}},
		}},
		{"tokens come back at the rate", 2, 3, []step{
			{0, 4, []time.Duration{0, 0, 0, 500 * ms}},
			{250 * ms, 1, []time.Duration{250 * ms}},
			{250 * ms, 2, []time.Duration{0, 500 * ms}},
		}},
		{"refused requests take nothing", 1, 1, []step{
			{0, 1, []time.Duration{0}},
			{100 * ms, 3, []time.Duration{900 * ms, 900 * ms, 900 * ms}},
			{900 * ms, 2, []time.Duration{0, time.Second}},
		}},
		{"a bucket fills up to its burst, no more", 10, 2, []step{
			{0, 2, []time.Duration{0, 0}},
			{time.Hour, 3, []time.Duration{0, 0, 100 * ms}},
		}},
		{"a slow rate waits long", 0.1, 1, []step{
			{0, 2, []time.Duration{0, 10 * time.Second}},
			{4 * time.Second, 1, []time.Duration{6 * time.Second}},
		}},
		{"a clock that goes back changes nothing", 1, 1, []step{
			{0, 1, []time.Duration{0}},
			{-time.Minute, 1, []time.Duration{time.Second}},
			{time.Minute + time.Second, 1, []time.Duration{0}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &fakeClock{t: limitEpoch}
			l := newLimiter(tc.rate, tc.burst, 0, c.now)
			for i, s := range tc.steps {
				c.advance(s.after)
				var got []time.Duration
				for range s.n {
					wait, _ := l.take("host web-1")
					got = append(got, wait)
				}
				if d := cmp.Diff(s.want, got); d != "" {
					t.Errorf("step %d (-want +got):\n%s", i, d)
				}
			}
		})
	}
}

// TestLimiterKeysAreIndependent: one key's empty bucket does not touch
// another's.
func TestLimiterKeysAreIndependent(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: limitEpoch}
	l := newLimiter(1, 2, 0, c.now)
	for i := range 10 {
		wait, _ := l.take("host flooder")
		if (i < 2) != (wait == 0) {
			t.Fatalf("flooder request %d: wait %s", i, wait)
		}
	}
	for _, k := range []string{"host web-1", "host web-2", "operator alice"} {
		if wait, _ := l.take(k); wait != 0 {
			t.Errorf("%s waits %s while another host floods", k, wait)
		}
	}
}

// TestLimiterWarnsOncePerMinute: the log hears of an empty bucket once a
// minute, not once per refused request.
func TestLimiterWarnsOncePerMinute(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: limitEpoch}
	l := newLimiter(1, 1, 0, c.now)
	var warned []int
	for i := range 200 {
		if _, warn := l.take("host flooder"); warn {
			warned = append(warned, i)
		}
		c.advance(time.Second / 2)
	}
	if d := cmp.Diff([]int{1, 121}, warned); d != "" {
		t.Errorf("warnings at requests (-want +got):\n%s", d)
	}
}

// TestLimiterForgetsIdleBuckets: a bucket that filled up again is dropped
// by the next sweep; one still short of tokens is kept.
func TestLimiterForgetsIdleBuckets(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: limitEpoch}
	l := newLimiter(1, 10, 0, c.now) // an empty bucket is full after 10 s
	for i := range 100 {
		l.take(fmt.Sprintf("address 10.0.0.%d", i))
	}
	c.advance(50 * time.Second)
	for range 10 {
		l.take("host busy") // drained, and short of tokens at the sweep
	}
	if got := l.size(); got != 101 {
		t.Fatalf("%d buckets, want 101", got)
	}
	c.advance(sweepEvery - 50*time.Second + time.Second)
	l.take("host busy") // sweeps
	if got := l.size(); got != 1 {
		t.Fatalf("after the sweep: %d buckets, want the busy one only", got)
	}
}

// TestLimiterCap: a full table sends new keys to one shared bucket, so a
// flood from ever new addresses neither grows memory nor gets a fresh
// burst per address; a sweep makes room again.
func TestLimiterCap(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: limitEpoch}
	l := newLimiter(1, 2, 4, c.now)
	admitted := 0
	for i := range 1000 {
		if wait, _ := l.take(fmt.Sprintf("address 2001:db8:%x::/64", i)); wait == 0 {
			admitted++
		}
	}
	if got := l.size(); got != 4 {
		t.Errorf("%d buckets, want the cap, 4", got)
	}
	// One request in each of the four buckets, then the shared one's two.
	if admitted != 4+2 {
		t.Errorf("%d of 1,000 requests from new addresses admitted, want 6", admitted)
	}
	// The table's own keys keep their buckets.
	c.advance(time.Second)
	if wait, _ := l.take("address 2001:db8:0::/64"); wait != 0 {
		t.Errorf("a key in the table waits %s after a second", wait)
	}
	// Once the buckets are full again, a new key gets its own.
	c.advance(10 * time.Second)
	if wait, _ := l.take("address 192.0.2.1"); wait != 0 {
		t.Errorf("a new key after the sweep waits %s", wait)
	}
	if got := l.size(); got != 1 {
		t.Errorf("after the sweep: %d buckets, want 1", got)
	}
}

func TestNoLimiter(t *testing.T) {
	t.Parallel()
	if l := newLimiter(0, 10, 0, time.Now); l != nil {
		t.Fatal("a rate of 0 made a limiter")
	}
	var l *limiter
	for range 1000 {
		if wait, _ := l.take("host x"); wait != 0 {
			t.Fatalf("no limiter waits %s", wait)
		}
	}
}

func TestAddressKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ remote, want string }{
		{"192.0.2.7:51234", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:443", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"@", "@"}, // a unix socket, or anything else: as it is
	} {
		if got := addressKey(tc.remote); got != tc.want {
			t.Errorf("addressKey(%q) = %q, want %q", tc.remote, got, tc.want)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{{time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {1500 * time.Millisecond, 2}, {100 * time.Second, 100}} {
		if got := retryAfterSeconds(tc.d); got != tc.want {
			t.Errorf("retryAfterSeconds(%s) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestRateLimitCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    RateLimit
		ok   bool
	}{
		{"off", RateLimit{}, true},
		{"defaults", RateLimit{DefaultRatePerHost, DefaultRateHostBurst, DefaultRatePerAddress, DefaultRateAddressBurst}, true},
		{"a fraction per second", RateLimit{PerHost: 0.2, HostBurst: 1}, true},
		{"no burst", RateLimit{PerHost: 1}, false},
		{"negative", RateLimit{PerAddress: -1, AddressBurst: 5}, false},
		{"no address burst", RateLimit{PerHost: 1, HostBurst: 1, PerAddress: 1}, false},
	} {
		if err := tc.r.Check(); (err == nil) != tc.ok {
			t.Errorf("%s: Check() = %v", tc.name, err)
		}
	}
}

// TestAdmit: hosts and operators are limited by their own buckets,
// everyone else by their address's; a refusal is 429 rate_limited with
// Retry-After, and counted by kind.
func TestAdmit(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: limitEpoch}
	m := newMetrics()
	l := &rateLimits{clients: newLimiter(1, 2, 0, c.now), addresses: newLimiter(0.5, 1, maxAddressBuckets, c.now), m: m}
	op := &Operator{Name: "alice"}
	send := func(cl client, remote string) (int, string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/agent/checkin", nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		if e := l.admit(w, r, cl); e != nil {
			if e.Status() != http.StatusTooManyRequests || e.Code != codes.RateLimited {
				t.Fatalf("refusal %d %s", e.Status(), e.Code)
			}
			return e.Status(), w.Header().Get("Retry-After")
		}
		return http.StatusOK, w.Header().Get("Retry-After")
	}
	type answer struct {
		Status     int
		RetryAfter string
	}
	var got []answer
	for _, r := range []struct {
		c      client
		remote string
	}{
		{client{host: "web-1"}, "192.0.2.1:1000"},
		{client{host: "web-1"}, "192.0.2.1:1000"},
		{client{host: "web-1"}, "192.0.2.1:1000"}, // empty
		{client{host: "web-2"}, "192.0.2.1:1001"}, // another host, same address
		{client{operator: op}, "192.0.2.1:1002"},
		{client{}, "192.0.2.1:1003"}, // unidentified: the address's bucket
		{client{}, "192.0.2.1:1004"}, // empty
		{client{}, "192.0.2.2:1000"}, // another address
		{client{host: "web-2"}, "192.0.2.1:1001"},
	} {
		s, ra := send(r.c, r.remote)
		got = append(got, answer{s, ra})
	}
	want := []answer{{200, ""}, {200, ""}, {429, "1"}, {200, ""}, {200, ""}, {200, ""}, {429, "2"}, {200, ""}, {200, ""}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("answers (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]float64{limitHost: 1, limitOperator: 0, limitAddress: 1}, rateLimitedCounts(t, m)); d != "" {
		t.Errorf("nixfleet_rate_limited_total by kind (-want +got):\n%s", d)
	}
	var none *rateLimits
	if e := none.admit(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil), client{}); e != nil {
		t.Errorf("no limits refused: %v", e)
	}
}

// rateLimitedCounts reads nixfleet_rate_limited_total by kind.
func rateLimitedCounts(t *testing.T, m *metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "nixfleet_rate_limited_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "kind" {
					out[lp.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestNoLimitsInDevMode: --insecure-dev identifies nobody, so it limits
// nobody (every agent of a demo shares 127.0.0.1); a zero RateLimit
// limits nobody either.
func TestNoLimitsInDevMode(t *testing.T) {
	t.Parallel()
	rl := RateLimit{PerHost: 1, HostBurst: 1, PerAddress: 1, AddressBurst: 1}
	if l := newRateLimits(Config{InsecureDev: true, RateLimit: rl}, newMetrics(), nil); l != nil {
		t.Error("--insecure-dev has rate limits")
	}
	l := newRateLimits(Config{}, newMetrics(), nil)
	if l == nil || l.clients != nil || l.addresses != nil {
		t.Errorf("the zero RateLimit limits: %+v", l)
	}
}

// BenchmarkLimiter is the cost a request pays for the rate limit: one
// bucket of a table of 10,000 (rfcs/0006 §Rate limits).
func BenchmarkLimiter(b *testing.B) {
	l := newLimiter(DefaultRatePerHost, DefaultRateHostBurst, 0, time.Now)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("host host-%05d", i)
		l.take(keys[i])
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.take(keys[i%len(keys)])
			i++
		}
	})
}
