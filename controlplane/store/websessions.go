package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A dashboard sign-in is one row of web_sessions, keyed by the hash of its
// one-time token. It is redeemable while its session_hash is '' and its
// token has not expired; RedeemWebLogin turns it into a session with one
// conditional UPDATE, so of two replicas redeeming the same token at once
// exactly one changes the row (PostgreSQL re-checks the condition after
// waiting for the other's row lock; SQLite has one writer). expires_at is
// the row's end: the token's until it is redeemed, then the session's, so
// PruneWebSessions needs one condition for both. Ending a session deletes
// its row.

// AddWebLogin records a dashboard sign-in (ErrDuplicate for a known
// TokenHash; an error when a field is empty or SessionTTL is shorter than
// a microsecond, the store's resolution).
func (s *db) AddWebLogin(ctx context.Context, l WebLogin) error {
	switch {
	case l.TokenHash == "" || l.Operator == "" || l.KeyHash == "":
		return fmt.Errorf("store: add web login: token hash, operator and key hash are required")
	case l.Expires.IsZero():
		return fmt.Errorf("store: add web login for %s: no expiry", l.Operator)
	case l.SessionTTL < time.Microsecond:
		return fmt.Errorf("store: add web login for %s: session ttl %s is not positive", l.Operator, l.SessionTTL)
	}
	expires := micros(l.Expires)
	var n int64
	err := s.write(ctx, func(tx *txn) error {
		var err error
		n, err = tx.exec(ctx, `INSERT INTO web_sessions (token_hash, operator, key_hash, token_expires_at, session_ttl, expires_at)
			VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (token_hash) DO NOTHING`,
			l.TokenHash, l.Operator, l.KeyHash, expires, l.SessionTTL.Microseconds(), expires)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: add web login for %s: %w", l.Operator, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: web login token", ErrDuplicate)
	}
	return nil
}

// RedeemWebLogin exchanges a sign-in for a session, once, and only while
// now is before the login's Expires: the session's Hash is sessionHash,
// Created now and Expires now+SessionTTL. ErrNotFound when the token is
// unknown, expired or already redeemed.
func (s *db) RedeemWebLogin(ctx context.Context, tokenHash, sessionHash string, now time.Time) (WebSession, error) {
	if sessionHash == "" {
		return WebSession{}, fmt.Errorf("store: redeem web login: empty session hash")
	}
	at := micros(now)
	ws := WebSession{Hash: sessionHash, Created: fromMicros(at)}
	var expires int64
	err := s.write(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, `UPDATE web_sessions SET session_hash = ?, created_at = ?, expires_at = ? + session_ttl
			WHERE token_hash = ? AND session_hash = '' AND token_expires_at > ?
			RETURNING operator, key_hash, expires_at`,
			sessionHash, at, at, tokenHash, at).Scan(&ws.Operator, &ws.KeyHash, &expires)
	})
	if errors.Is(err, errNoRows) {
		return WebSession{}, fmt.Errorf("%w: web login token (unknown, expired or redeemed)", ErrNotFound)
	}
	if err != nil {
		return WebSession{}, fmt.Errorf("store: redeem web login: %w", err)
	}
	ws.Expires = fromMicros(expires)
	return ws, nil
}

// WebSession returns a session by its hash (ErrNotFound when it is
// unknown, ended, or expired at or before now).
func (s *db) WebSession(ctx context.Context, hash string, now time.Time) (WebSession, error) {
	if hash == "" { // the hash of every row not redeemed yet
		return WebSession{}, fmt.Errorf("%w: web session", ErrNotFound)
	}
	ws := WebSession{Hash: hash}
	var created, expires int64
	err := s.read(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, "SELECT operator, key_hash, created_at, expires_at FROM web_sessions WHERE session_hash = ? AND expires_at > ?",
			hash, micros(now)).Scan(&ws.Operator, &ws.KeyHash, &created, &expires)
	})
	if errors.Is(err, errNoRows) {
		return WebSession{}, fmt.Errorf("%w: web session", ErrNotFound)
	}
	if err != nil {
		return WebSession{}, fmt.Errorf("store: web session: %w", err)
	}
	ws.Created, ws.Expires = fromMicros(created), fromMicros(expires)
	return ws, nil
}

// EndWebSession ends a session at once by deleting it: its token, already
// spent, goes with it. Ending an unknown session does nothing.
func (s *db) EndWebSession(ctx context.Context, hash string) error {
	if hash == "" {
		return nil
	}
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.exec(ctx, "DELETE FROM web_sessions WHERE session_hash = ?", hash)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: end web session: %w", err)
	}
	return nil
}

// PruneWebSessions deletes the sign-ins and sessions that expired before
// now, and returns how many went.
func (s *db) PruneWebSessions(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *txn) error {
		var err error
		n, err = tx.exec(ctx, "DELETE FROM web_sessions WHERE expires_at < ?", micros(now))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune web sessions: %w", err)
	}
	return n, nil
}
