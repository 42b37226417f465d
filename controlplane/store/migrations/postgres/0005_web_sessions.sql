-- 0005_web_sessions (PostgreSQL): dashboard sign-ins (rfcs/0011).

-- web_sessions: one row per one-time sign-in an operator's CLI asked for,
-- and the session it became. token_hash is the hex SHA-256 of the
-- one-time token, redeemable before token_expires_at while session_hash
-- is ''; redeeming it sets session_hash (the hex SHA-256 of the session
-- secret in the browser's cookie) and created_at, once. key_hash is the
-- hex SHA-256 of the operator's public key at sign-in; session_ttl is in
-- microseconds. expires_at is when the row stops counting: the token's
-- expiry until it is redeemed, then the session's.
CREATE TABLE web_sessions (
	token_hash       TEXT PRIMARY KEY,
	operator         TEXT NOT NULL,
	key_hash         TEXT NOT NULL,
	token_expires_at BIGINT NOT NULL,
	session_ttl      BIGINT NOT NULL CHECK (session_ttl > 0),
	session_hash     TEXT NOT NULL DEFAULT '',
	created_at       BIGINT NOT NULL DEFAULT 0,
	expires_at       BIGINT NOT NULL
);
CREATE UNIQUE INDEX web_sessions_session ON web_sessions (session_hash) WHERE session_hash <> '';
CREATE INDEX web_sessions_expires ON web_sessions (expires_at);
