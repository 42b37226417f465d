package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testForecasts: a rollout's latest forecast (rfcs/0014) reads back as
// put, but for its first, which the first put sets and later ones keep; a
// forecast older than the stored one, or of a rollout the store does not
// have, is not written; a body over store.MaxForecastBody is refused and
// nothing of its batch written; writing forecasts is no change a tick
// must see; a rollout's forecast goes when Prune deletes it.
func testForecasts(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := internals(t, s)
	m := newSim(t, s)
	hash := m.release(testFleet(t).Build(), fleetkit.Commit(2), "edge")[0].ManifestHash
	old, cut := t0.Add(-3*time.Hour), t0.Add(-time.Hour)
	m.now = old
	m.open(
		crafted("edge", fleetkit.Commit(1), rc.RolloutConverged, old, old, hash, craftedHost("a", rc.HostConverged, old)),
		crafted("edge", fleetkit.Commit(2), rc.RolloutActive, old.Add(time.Minute), old, hash, craftedHost("a", rc.HostPending, old)),
	)
	done, live := proto.RolloutID("edge", fleetkit.Commit(1)), proto.RolloutID("edge", fleetkit.Commit(2))
	get := func(id string) store.Forecast {
		t.Helper()
		f, err := s.Forecast(ctx, id)
		must(t, err)
		return f
	}

	_, err := s.Forecast(ctx, done)
	wantErr(t, err, store.ErrNotFound, "the forecast of a rollout never forecast")
	before, err := s.Watermark(ctx)
	must(t, err)

	// The first put sets the first forecast from MadeAt and End, whatever
	// the caller passes; a rollout the store does not have is skipped.
	made1, end1 := old.Add(time.Minute), old.Add(90*time.Minute)
	must(t, s.PutForecasts(ctx, []store.Forecast{
		{RolloutID: done, MadeAt: made1, End: end1, FirstMadeAt: t0, FirstEnd: t0, Body: []byte(`{"v":1}`)},
		{RolloutID: "edge@unknown", MadeAt: made1, End: end1, Body: []byte(`{}`)},
		{RolloutID: live, MadeAt: made1, Body: nil},
	}))
	diff(t, "the first forecast", get(done),
		store.Forecast{RolloutID: done, MadeAt: made1, End: end1, FirstMadeAt: made1, FirstEnd: end1, Body: []byte(`{"v":1}`)})
	// A rollout not expected to end within the forecast: End zero.
	diff(t, "a forecast without an end", get(live), store.Forecast{RolloutID: live, MadeAt: made1, FirstMadeAt: made1, Body: []byte{}})
	_, err = s.Forecast(ctx, "edge@unknown")
	wantErr(t, err, store.ErrNotFound, "the forecast of a rollout the store does not have")
	if n, err := in.CountRows(ctx, "forecasts"); err != nil || n != 2 {
		t.Fatalf("%d forecast rows (%v), want 2", n, err)
	}

	// A later forecast replaces the latest and keeps the first.
	made2 := made1.Add(time.Minute)
	must(t, s.PutForecasts(ctx, []store.Forecast{{RolloutID: done, MadeAt: made2, FirstMadeAt: made2, Body: []byte(`{"v":2}`)}}))
	want := store.Forecast{RolloutID: done, MadeAt: made2, FirstMadeAt: made1, FirstEnd: end1, Body: []byte(`{"v":2}`)}
	diff(t, "the forecast after a later one", get(done), want)

	// An older one (a slow forecaster) is ignored, also in one batch with
	// a later one of the same rollout.
	must(t, s.PutForecasts(ctx, []store.Forecast{{RolloutID: done, MadeAt: made2.Add(-time.Second), End: end1, Body: []byte(`{"v":"old"}`)}}))
	diff(t, "the forecast after an older one", get(done), want)
	made3 := made2.Add(time.Minute)
	must(t, s.PutForecasts(ctx, []store.Forecast{
		{RolloutID: done, MadeAt: made3, End: end1, Body: []byte(`{"v":3}`)},
		{RolloutID: done, MadeAt: made2, Body: []byte(`{"v":"old"}`)},
	}))
	want = store.Forecast{RolloutID: done, MadeAt: made3, End: end1, FirstMadeAt: made1, FirstEnd: end1, Body: []byte(`{"v":3}`)}
	diff(t, "the forecast after a batch with an older one", get(done), want)

	// A body over the cap is refused, and its batch written not at all.
	err = s.PutForecasts(ctx, []store.Forecast{
		{RolloutID: live, MadeAt: made3, Body: []byte(`{"v":3}`)},
		{RolloutID: done, MadeAt: made3.Add(time.Minute), Body: bytes.Repeat([]byte{'x'}, store.MaxForecastBody+1)},
	})
	wantErr(t, err, store.ErrTooLarge, "a forecast over the cap")
	diff(t, "the forecast after a refused batch", get(done), want)
	if got := get(live); !got.MadeAt.Equal(made1) {
		t.Errorf("a refused batch wrote the forecast of %s: made at %s", live, got.MadeAt)
	}
	// A body of the cap exactly is stored.
	most := bytes.Repeat([]byte{'y'}, store.MaxForecastBody)
	must(t, s.PutForecasts(ctx, []store.Forecast{{RolloutID: live, MadeAt: made3, Body: most}}))
	if got := get(live); !bytes.Equal(got.Body, most) {
		t.Errorf("a body of %d bytes read back as %d bytes", len(most), len(got.Body))
	}

	after, err := s.Watermark(ctx)
	must(t, err)
	if after.Changes != before.Changes {
		t.Errorf("writing forecasts moved the changes a tick must see from %d to %d", before.Changes, after.Changes)
	}

	// Prune deletes the converged rollout, not the channel's latest: the
	// forecast goes with it.
	_, pruned, err := s.Prune(ctx, cut)
	must(t, err)
	if pruned != 1 {
		t.Fatalf("Prune removed %d rollouts, want 1", pruned)
	}
	_, err = s.Forecast(ctx, done)
	wantErr(t, err, store.ErrNotFound, "the forecast of a pruned rollout")
	if n, err := in.CountRows(ctx, "forecasts"); err != nil || n != 1 {
		t.Errorf("%d forecast rows after the prune (%v), want 1", n, err)
	}
	get(live)
	// A forecast of the pruned rollout is skipped now.
	must(t, s.PutForecasts(ctx, []store.Forecast{{RolloutID: done, MadeAt: t0, Body: []byte(`{}`)}}))
	_, err = s.Forecast(ctx, done)
	wantErr(t, err, store.ErrNotFound, "a forecast put after its rollout was pruned")
}

// testActivationTimes: the hosts' activation times (rfcs/0014) read back
// as put, Typical to the millisecond (rounded down) and MeasuredAt to the
// microsecond, in UTC; a later put replaces a host's, and a host given
// twice in one batch keeps the last; an empty host, a negative typical
// time or fewer than one sample is refused and nothing of its batch
// written; a batch larger than one statement is written whole; writing
// activation times is no change a tick must see.
func testActivationTimes(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := internals(t, s)
	get := func() map[string]store.ActivationTime {
		t.Helper()
		got, err := s.ActivationTimes(ctx)
		must(t, err)
		return got
	}
	diff(t, "the activation times of an empty store", get(), map[string]store.ActivationTime{})
	before, err := s.Watermark(ctx)
	must(t, err)

	east := time.FixedZone("east", 5*3600)
	at1 := t0.Add(1234567 * time.Nanosecond).In(east)
	must(t, s.PutActivationTimes(ctx, []store.ActivationTime{
		{Host: "a", Typical: 90*time.Second + 1999*time.Microsecond, Samples: 3, MeasuredAt: at1},
		{Host: "b", Typical: 0, Samples: 1, MeasuredAt: t0},
	}))
	want := map[string]store.ActivationTime{
		"a": {Host: "a", Typical: 90*time.Second + time.Millisecond, Samples: 3, MeasuredAt: t0.Add(1234 * time.Microsecond)},
		"b": {Host: "b", Typical: 0, Samples: 1, MeasuredAt: t0},
	}
	got := get()
	diff(t, "the activation times put", got, want)
	for h, a := range got {
		if a.MeasuredAt.Location() != time.UTC {
			t.Errorf("%s: measured at %s, want UTC", h, a.MeasuredAt)
		}
	}

	// A later put replaces a host's, whatever it held (here an older
	// measurement with fewer samples); in one batch the last of a host's
	// wins.
	must(t, s.PutActivationTimes(ctx, []store.ActivationTime{
		{Host: "a", Typical: time.Hour, Samples: 9, MeasuredAt: t0.Add(time.Hour)},
		{Host: "a", Typical: 2 * time.Minute, Samples: 2, MeasuredAt: t0.Add(-time.Hour)},
	}))
	want["a"] = store.ActivationTime{Host: "a", Typical: 2 * time.Minute, Samples: 2, MeasuredAt: t0.Add(-time.Hour)}
	diff(t, "the activation times after a later put", get(), want)

	// Invalid input is refused, and its batch written not at all.
	for _, bad := range []store.ActivationTime{
		{Host: "", Typical: time.Minute, Samples: 1, MeasuredAt: t0},
		{Host: "c", Typical: -time.Millisecond, Samples: 1, MeasuredAt: t0},
		{Host: "c", Typical: time.Minute, Samples: 0, MeasuredAt: t0},
		{Host: "c", Typical: time.Minute, Samples: -1, MeasuredAt: t0},
	} {
		err := s.PutActivationTimes(ctx, []store.ActivationTime{
			{Host: "a", Typical: time.Second, Samples: 5, MeasuredAt: t0},
			{Host: "d", Typical: time.Second, Samples: 5, MeasuredAt: t0},
			bad,
		})
		if err == nil {
			t.Fatalf("PutActivationTimes accepted %+v", bad)
		}
		diff(t, "the activation times after a refused batch", get(), want)
	}

	// A batch of many hosts takes more than one statement on either
	// backend, and is written whole.
	many := make([]store.ActivationTime, 2500)
	for i := range many {
		h := fmt.Sprintf("m%04d", i)
		many[i] = store.ActivationTime{Host: h, Typical: time.Duration(i) * time.Millisecond, Samples: i + 1, MeasuredAt: t0.Add(time.Duration(i) * time.Microsecond)}
		want[h] = many[i]
	}
	must(t, s.PutActivationTimes(ctx, many))
	diff(t, "the activation times after a large batch", get(), want)
	if n, err := in.CountRows(ctx, "activation_times"); err != nil || n != int64(len(want)) {
		t.Errorf("%d activation time rows (%v), want %d", n, err, len(want))
	}
	must(t, s.PutActivationTimes(ctx, nil))

	after, err := s.Watermark(ctx)
	must(t, err)
	if after.Changes != before.Changes {
		t.Errorf("writing activation times moved the changes a tick must see from %d to %d", before.Changes, after.Changes)
	}
}
