package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
)

// testWebSessions: a dashboard sign-in becomes a session once, only
// before its token expires; a session counts until it expires or is
// ended; duplicates and incomplete logins are refused; PruneWebSessions removes what
// expired.
func testWebSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	const ttl = 8 * time.Hour
	login := func(token string, expires time.Time) store.WebLogin {
		return store.WebLogin{TokenHash: token, Operator: "ada", KeyHash: "key-ada", Expires: expires, SessionTTL: ttl}
	}
	must(t, s.AddWebLogin(ctx, login("tok-1", t0.Add(5*time.Minute))))
	wantErr(t, s.AddWebLogin(ctx, login("tok-1", t0.Add(time.Hour))), store.ErrDuplicate, "a known token")
	for _, bad := range []store.WebLogin{
		{Operator: "ada", KeyHash: "k", Expires: t0, SessionTTL: ttl},
		{TokenHash: "x", KeyHash: "k", Expires: t0, SessionTTL: ttl},
		{TokenHash: "x", Operator: "ada", Expires: t0, SessionTTL: ttl},
		{TokenHash: "x", Operator: "ada", KeyHash: "k", SessionTTL: ttl},
		{TokenHash: "x", Operator: "ada", KeyHash: "k", Expires: t0},
		{TokenHash: "x", Operator: "ada", KeyHash: "k", Expires: t0, SessionTTL: -time.Second},
	} {
		if err := s.AddWebLogin(ctx, bad); err == nil {
			t.Errorf("AddWebLogin(%+v) succeeded", bad)
		}
	}

	// Redeemed once, a microsecond before the token expires; the session
	// lasts its ttl from then.
	now := t0.Add(5*time.Minute - time.Microsecond)
	ws, err := s.RedeemWebLogin(ctx, "tok-1", "sess-1", now)
	must(t, err)
	want := store.WebSession{Hash: "sess-1", Operator: "ada", KeyHash: "key-ada", Created: now, Expires: now.Add(ttl)}
	diff(t, "redeemed session", ws, want)
	_, err = s.RedeemWebLogin(ctx, "tok-1", "sess-2", now)
	wantErr(t, err, store.ErrNotFound, "a second redeem")
	_, err = s.RedeemWebLogin(ctx, "unknown", "sess-3", now)
	wantErr(t, err, store.ErrNotFound, "redeem an unknown token")
	if _, err := s.WebSession(ctx, "sess-2", now); err == nil {
		t.Fatal("a failed redeem made a session")
	}

	// A token is dead at its expiry.
	must(t, s.AddWebLogin(ctx, login("tok-late", t0.Add(time.Minute))))
	_, err = s.RedeemWebLogin(ctx, "tok-late", "sess-late", t0.Add(time.Minute))
	wantErr(t, err, store.ErrNotFound, "redeem at the token's expiry")

	// The session counts before its expiry, not at or after it.
	for _, tc := range []struct {
		name string
		at   time.Time
		ok   bool
	}{
		{"at creation", now, true},
		{"just before expiry", ws.Expires.Add(-time.Microsecond), true},
		{"at expiry", ws.Expires, false},
		{"after expiry", ws.Expires.Add(time.Hour), false},
	} {
		got, err := s.WebSession(ctx, "sess-1", tc.at)
		if tc.ok {
			must(t, err)
			diff(t, "session "+tc.name, got, want)
		} else {
			wantErr(t, err, store.ErrNotFound, "session "+tc.name)
		}
	}

	// Signing out ends the session at once and leaves the token spent;
	// ending it again, or an unknown one, is fine.
	must(t, s.EndWebSession(ctx, "sess-1"))
	_, err = s.WebSession(ctx, "sess-1", now)
	wantErr(t, err, store.ErrNotFound, "an ended session")
	_, err = s.RedeemWebLogin(ctx, "tok-1", "sess-4", now)
	wantErr(t, err, store.ErrNotFound, "redeem the token of an ended session")
	must(t, s.EndWebSession(ctx, "sess-1"))
	must(t, s.EndWebSession(ctx, "unknown"))
	must(t, s.EndWebSession(ctx, ""))
	must(t, s.AddWebLogin(ctx, login("tok-2", t0.Add(time.Hour))))
	_, err = s.WebSession(ctx, "", t0) // the hash of a login not redeemed yet
	wantErr(t, err, store.ErrNotFound, "the empty session hash")
	// A session hash must be given and new; a refused redeem spends
	// nothing.
	if _, err := s.RedeemWebLogin(ctx, "tok-2", "", t0); err == nil {
		t.Fatal("redeemed with an empty session hash")
	}
	must(t, s.AddWebLogin(ctx, login("tok-3", t0.Add(time.Hour))))
	_, err = s.RedeemWebLogin(ctx, "tok-3", "sess-3", t0)
	must(t, err)
	if _, err := s.RedeemWebLogin(ctx, "tok-2", "sess-3", t0); err == nil {
		t.Fatal("redeemed with the hash of another session")
	}
	must(t, s.EndWebSession(ctx, "sess-3"))
	ws2, err := s.RedeemWebLogin(ctx, "tok-2", "sess-5", t0)
	must(t, err)
	must(t, s.EndWebSession(ctx, "")) // must not touch a login not redeemed, nor a session
	if _, err := s.WebSession(ctx, "sess-5", t0); err != nil {
		t.Fatalf("the session after ending the empty hash: %v", err)
	}

	// PruneWebSessions removes the logins and sessions expired before the cut:
	// tok-late (expired at t0+1m); not sess-5 nor a login still valid.
	in := internals(t, s)
	must(t, s.AddWebLogin(ctx, login("tok-open", t0.Add(2*time.Hour))))
	count := func() int64 {
		t.Helper()
		n, err := in.CountRows(ctx, "web_sessions")
		must(t, err)
		return n
	}
	if n := count(); n != 3 {
		t.Fatalf("%d web_sessions rows, want 3 (tok-late, sess-5, tok-open)", n)
	}
	_, err = s.PruneWebSessions(ctx, t0.Add(time.Minute))
	must(t, err)
	if n := count(); n != 3 {
		t.Fatalf("Prune at the expiry of tok-late left %d rows, want 3 (it expired at, not before, the cut)", n)
	}
	_, err = s.PruneWebSessions(ctx, t0.Add(90*time.Minute))
	must(t, err)
	if n := count(); n != 2 {
		t.Fatalf("Prune left %d rows, want 2", n)
	}
	if _, err := s.WebSession(ctx, "sess-5", t0); err != nil {
		t.Fatalf("Prune removed a live session: %v", err)
	}
	if _, err := s.RedeemWebLogin(ctx, "tok-open", "sess-6", t0.Add(time.Minute)); err != nil {
		t.Fatalf("Prune removed a live login: %v", err)
	}
	_, err = s.PruneWebSessions(ctx, ws2.Expires.Add(time.Microsecond))
	must(t, err)
	if n := count(); n != 1 {
		t.Fatalf("Prune after sess-5 expired left %d rows, want 1 (sess-6)", n)
	}
}

// testWebLoginRace: browsers (or replicas) redeeming one token at once:
// exactly one gets a session.
func testWebLoginRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 3 {
		token := fmt.Sprintf("tok-%d", round)
		must(t, s.AddWebLogin(ctx, store.WebLogin{TokenHash: token, Operator: "ada", KeyHash: "k", Expires: t0.Add(time.Minute), SessionTTL: time.Hour}))
		const racers = 8
		var wg sync.WaitGroup
		won := make(chan store.WebSession, racers)
		errs := make(chan error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ws, err := s.RedeemWebLogin(ctx, token, fmt.Sprintf("sess-%d-%d", round, i), t0)
				if err != nil {
					errs <- err
					return
				}
				won <- ws
			}()
		}
		wg.Wait()
		close(won)
		close(errs)
		if len(won) != 1 {
			t.Fatalf("round %d: %d redeemed the token, want 1", round, len(won))
		}
		for err := range errs {
			wantErr(t, err, store.ErrNotFound, "a losing redeem")
		}
		ws := <-won
		got, err := s.WebSession(ctx, ws.Hash, t0)
		must(t, err)
		diff(t, "the winner's session", got, ws)
	}
}
