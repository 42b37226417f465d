package controlplane_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
)

// tagInterval is how often the hosts of these tests check in.
const tagInterval = 30 * time.Second

// tagHost checks in as one host of the fleet, always with the same
// status, echoing the tag of its last answer as an agent does.
type tagHost struct {
	t    *testing.T
	e    *env
	c    *caller
	key  []byte
	name string
	tag  string
}

func newTagHost(t *testing.T, e *env, name string) *tagHost {
	t.Helper()
	for _, h := range e.spec.Hosts {
		if h.Name == name {
			return &tagHost{t: t, e: e, c: e.caller(h.Key, h.Name), key: h.Key, name: name}
		}
	}
	t.Fatalf("no host %s in the spec", name)
	return nil
}

// status is what the host runs and sends: healthy, on v0.
func (h *tagHost) status() store.HostStatus {
	c := fleetrepo.Closure(h.name, "v0")
	return store.HostStatus{Current: c, Booted: c, Probes: proto.ProbeSummary{Total: 2}}
}

// answered is one answer's tag, and the test clock just before the
// request and just after its answer: the server's time is in between.
type answered struct {
	tagAt, before, after time.Time
}

// stampedNow reports whether the answer's tag has the time of its own
// request (its unix second), not an older one.
func (a answered) stampedNow() bool {
	return !a.tagAt.Before(time.Unix(a.before.Unix(), 0)) && !a.tagAt.After(a.after)
}

// checkin sends the host's status with its tag and keeps the answer's.
func (h *tagHost) checkin() answered {
	h.t.Helper()
	st := h.status()
	body := mustJSON(h.t, proto.CheckinRequest{Hostname: h.name, Current: st.Current, Booted: st.Booted,
		Probes: st.Probes, StatusTag: h.tag})
	before := h.e.clock.Now()
	a := h.c.post("/v1/agent/checkin", body)
	after := h.e.clock.Now()
	var resp proto.CheckinResponse
	if a.status != http.StatusOK || json.Unmarshal(a.body, &resp) != nil {
		h.t.Fatalf("check-in: HTTP %d %s", a.status, a.body)
	}
	return h.keep(resp.StatusTag, before, after)
}

// reportProbes sends the host's probe results, unchanged, as a
// probe_results report, and keeps the answer's tag.
func (h *tagHost) reportProbes() answered {
	h.t.Helper()
	st := h.status()
	before := h.e.clock.Now()
	body := mustJSON(h.t, proto.ReportRequest{Hostname: h.name, Kind: proto.ReportProbeResults,
		At: before.UTC().Format(time.RFC3339), Probes: &st.Probes})
	a := h.c.signed(h.key, body)
	after := h.e.clock.Now()
	var resp proto.ReportResponse
	if a.status != http.StatusOK || json.Unmarshal(a.body, &resp) != nil {
		h.t.Fatalf("probe report: HTTP %d %s", a.status, a.body)
	}
	return h.keep(resp.StatusTag, before, after)
}

func (h *tagHost) keep(tag string, before, after time.Time) answered {
	h.t.Helper()
	at, digest, ok := strings.Cut(tag, ".")
	sec, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		h.t.Fatalf("status tag %q is not <unix seconds>.<digest>", tag)
	}
	if want := store.StatusDigest(h.status()); digest != want {
		h.t.Fatalf("status tag %q names digest %s, want the host's status %s", tag, digest, want)
	}
	h.tag = tag
	return answered{tagAt: time.Unix(sec, 0), before: before, after: after}
}

// openStore opens the test's store beside the control plane, as a
// restore or an operator's tool would.
func openStore(t *testing.T, e *env) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), e.cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// storedDigest is the digest of a host's status as stored (the
// activation, which check-ins never touch, left out).
func storedDigest(t *testing.T, st store.Store, host string) string {
	t.Helper()
	rec, err := st.Host(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	o := rec.Observed
	return store.StatusDigest(store.HostStatus{Current: o.Current, Booted: o.Booted, Probes: o.Probes,
		FailedUnits: o.FailedUnits, Compliance: o.Compliance, Deferred: o.Deferred, Quarantine: o.Quarantine})
}

// backupStatus is an older status of the host, as a backup taken before
// its last rollout holds it: another closure and a failing probe.
func backupStatus(host string) store.HostStatus {
	c := fleetrepo.Closure(host, "v-old")
	return store.HostStatus{Current: c, Booted: c, Probes: proto.ProbeSummary{Total: 2, Failed: []string{"http-ok"}}}
}

// TestStatusTagKeepsItsTime: a host that checks in every 30 s echoing its
// tag, its status unchanged, gets back a tag with the time of the last
// comparison, not of the answer; the first check-in after tagTTL compares
// again (a status rewritten behind the control plane's back just before
// is put right) and is stamped anew. A probe_results report compares too
// (its tag is stamped now), and the next comparison is due tagTTL after it.
func TestStatusTagKeepsItsTime(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			st := openStore(t, e)
			h := newTagHost(t, e, "web-1")
			real := store.StatusDigest(h.status())

			a := h.checkin() // no tag: compared
			if !a.stampedNow() {
				t.Fatalf("the first check-in's tag has time %s, want its own (%s)", a.tagAt, a.before)
			}
			start, last, compares := a.tagAt, a.tagAt, []time.Duration{0}
			for i := 1; i <= 60; i++ { // 30 minutes
				e.clock.Advance(tagInterval)
				if i == 30 {
					a = h.reportProbes()
					if !a.stampedNow() {
						t.Fatalf("a probe report's tag has time %s, want its own (%s)", a.tagAt, a.before)
					}
					last = a.tagAt
					continue
				}
				a = h.checkin()
				switch {
				case a.after.Sub(last) <= controlplane.TagTTL:
					if !a.tagAt.Equal(last) {
						t.Fatalf("check-in %d, %s after the last comparison: tag time %s, want %s (trusted, not compared)",
							i, a.before.Sub(last), a.tagAt, last)
					}
					if i == 19 { // the last check-in before the first expiry
						if _, err := st.RecordStatus(context.Background(), h.name, backupStatus(h.name)); err != nil {
							t.Fatal(err)
						}
					}
				case a.before.Sub(last) > controlplane.TagTTL:
					if !a.stampedNow() {
						t.Fatalf("check-in %d, %s after the last comparison: tag time %s, want its own (%s): the tag expired",
							i, a.before.Sub(last), a.tagAt, a.before)
					}
					if got := storedDigest(t, st, h.name); got != real {
						t.Fatalf("check-in %d compared, but the stored status is %s, want the host's %s", i, got, real)
					}
					last = a.tagAt
					compares = append(compares, last.Sub(start))
				default:
					t.Fatalf("check-in %d is on the tag's expiry (%s after the last comparison): the test's schedule is off",
						i, a.before.Sub(last))
				}
			}
			// Check-ins compared at 0 and after 10 min; the probe report
			// (15 min) put the next one off to 25 min.
			if len(compares) != 3 {
				t.Errorf("check-ins compared %v after the first, want three times: at 0s, 10m0s and 25m0s", compares)
			}
		})
	}
}

// TestStatusTagRestoredStatus: the stored status is rewritten behind the
// control plane's back, as a restore from an older backup or a lost
// asynchronous commit would (a closure and a failing probe the host no
// longer has), while the host keeps checking in and echoing its tag, which
// the server trusts. The next batch of check-ins notices that the host
// carried another status than the stored one, and the host's next
// check-in compares it and writes it (rfcs/0007 §Status tags 4); until
// then, the stored status is not taken as said since (rfcs/0003 rule 8).
func TestStatusTagRestoredStatus(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			st := openStore(t, e)
			ctx := context.Background()
			h := newTagHost(t, e, "web-2")
			real := store.StatusDigest(h.status())

			h.checkin()
			e.clock.Advance(tagInterval)
			h.checkin()
			e.tick()
			if got := storedDigest(t, st, h.name); got != real {
				t.Fatalf("stored status %s after check-ins, want the host's %s", got, real)
			}
			said := func() time.Time {
				rec, err := st.Host(ctx, h.name)
				if err != nil {
					t.Fatal(err)
				}
				return rec.Observed.StatusAt
			}
			before := said()

			if changed, err := st.RecordStatus(ctx, h.name, backupStatus(h.name)); err != nil || !changed {
				t.Fatalf("restoring the backup's status: changed %v, %v", changed, err)
			}
			e.clock.Advance(tagInterval)
			a := h.checkin()
			if a.stampedNow() {
				t.Fatal("the check-in after the restore compared its status: its tag was not trusted")
			}
			if got := storedDigest(t, st, h.name); got == real {
				t.Fatal("the status was put right before the check-ins were written")
			}
			e.tick()
			if at := said(); !at.Equal(before) {
				t.Fatalf("the restored status is said at %s, want %s: no check-in since carried it", at, before)
			}
			e.clock.Advance(tagInterval)
			if a = h.checkin(); !a.stampedNow() {
				t.Fatal("the check-in after the batch trusted its tag: it did not compare its status")
			}
			e.tick()
			if got := storedDigest(t, st, h.name); got != real {
				t.Fatalf("after the check-in that compared, the stored status is %s, want the host's %s", got, real)
			}
			if at := said(); at.Before(a.before.Truncate(time.Microsecond)) || at.After(a.after) {
				t.Errorf("the status written again is said at %s, want the check-in's time (%s to %s)", at, a.before, a.after)
			}
		})
	}
}

// TestStatusTagSavesWrite: while the echoed tag is fresh and names the
// host's status, a check-in neither compares nor writes the status: its
// answer keeps the tag's old time (only a comparison stamps the time of
// its own request), and the store's change counter (which every status
// write moves) does not move. A check-in whose status is not the one its
// fresh tag names is compared and written at once. (A status changed
// behind the control plane's back is put right by the check-in batch
// instead: TestStatusTagRestoredStatus.)
func TestStatusTagSavesWrite(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			st := openStore(t, e)
			ctx := context.Background()
			h := newTagHost(t, e, "web-3")

			first := h.checkin()
			real := store.StatusDigest(h.status())
			w0, err := st.Watermark(ctx)
			if err != nil {
				t.Fatal(err)
			}
			last := int(controlplane.TagTTL/tagInterval) - 1 // the last check-in before the tag expires
			for i := 1; i < last; i++ {
				e.clock.Advance(tagInterval)
				a := h.checkin()
				if a.after.Sub(first.tagAt) > controlplane.TagTTL {
					t.Fatalf("check-in %d is past the tag's expiry: the test's schedule is off", i)
				}
				if a.stampedNow() {
					t.Fatalf("check-in %d with a fresh tag (%s old) compared its status: its answer is stamped now", i, a.before.Sub(first.tagAt))
				}
				if got := storedDigest(t, st, h.name); got != real {
					t.Fatalf("check-in %d with a fresh tag (%s old) changed the stored status to %s", i, a.before.Sub(first.tagAt), got)
				}
				if w, err := st.Watermark(ctx); err != nil || w.Changes != w0.Changes {
					t.Fatalf("check-in %d with a fresh tag moved the change counter from %d to %d (%v)", i, w0.Changes, w.Changes, err)
				}
			}

			// The same fresh tag with a status it does not name.
			e.clock.Advance(tagInterval)
			c := fleetrepo.Closure(h.name, "v1")
			a := h.c.post("/v1/agent/checkin", mustJSON(t, proto.CheckinRequest{Hostname: h.name, Current: c, Booted: c,
				Probes: proto.ProbeSummary{Total: 2}, StatusTag: h.tag}))
			if a.status != http.StatusOK {
				t.Fatalf("check-in: HTTP %d %s", a.status, a.body)
			}
			if age := e.clock.Now().Sub(first.tagAt); age > controlplane.TagTTL {
				t.Fatalf("check-in %d is past the tag's expiry (%s): the test's schedule is off", last, age)
			}
			want := store.StatusDigest(store.HostStatus{Current: c, Booted: c, Probes: proto.ProbeSummary{Total: 2}})
			if got := storedDigest(t, st, h.name); got != want {
				t.Errorf("a check-in whose status its fresh tag does not name left the stored status %s, want %s", got, want)
			}
		})
	}
}
