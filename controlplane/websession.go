package controlplane

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
)

// Dashboard sign-in (rfcs/0011 §Sign-in). An operator's CLI, authenticated
// by the operator's key like every API call, asks POST /v1/web/logins for
// a one-time token; the browser opens /ui/login?token=…, which redeems it
// once for a session cookie. The store keeps only hashes of the token and
// of the session secret, so that a database dump signs nobody in, and so
// that every replica knows every session.

// Cookie and lifetimes.
const (
	// webCookie is the session cookie. The __Host- prefix makes browsers
	// refuse it unless it is Secure, has Path=/ and no Domain.
	webCookie = "__Host-nixfleet-session"
	// webLoginTTL is how long a one-time token lasts unless the CLI asks
	// for another lifetime, at most webLoginMaxTTL.
	webLoginTTL    = 2 * time.Minute
	webLoginMaxTTL = time.Hour
)

// webUser is who sent a dashboard request.
type webUser struct {
	Name string
	Role string
	// Dev: --insecure-dev, where nobody signs in and everybody acts.
	Dev bool
	// CSRF is the token every state-changing form must carry.
	CSRF string
	// Expires is when the session ends (zero for --insecure-dev).
	Expires time.Time
	hash    string // the session's, for signing out
}

// CanAct reports whether the user may pause, resume, cancel and roll back:
// an operator or an approver.
func (u webUser) CanAct() bool { return u.Dev || roleActs(u.Role) }

// CanApprove reports whether the user may approve waves and break freezes:
// an approver.
func (u webUser) CanApprove() bool { return u.Dev || roleApproves(u.Role) }

// hashHex is the hex SHA-256 of a secret, as the store keeps it.
func hashHex(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// csrfFor derives a session's CSRF token from its secret: only a page
// served to the cookie's holder has it, and the server keeps nothing more.
func csrfFor(secret string) string { return hashHex("nixfleet csrf\x00" + secret) }

// newSecret is 32 random bytes, base64url.
func newSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// webLogins is POST /v1/web/logins: an operator (any role) asks for a
// one-time sign-in link for the dashboard.
func (s *Server) webLogins(w http.ResponseWriter, r *http.Request, c client) *apiError {
	if e := may(c, false); e != nil {
		return e
	}
	var req proto.WebLoginRequest
	if e := readOptionalJSON(w, r, &req); e != nil {
		return e
	}
	ttl := webLoginTTL
	if v := req.ValidSeconds; v != nil {
		ttl = time.Duration(*v) * time.Second
		if *v < 1 || ttl > webLoginMaxTTL {
			return errorf(codes.BadRequest, "validSeconds must be between 1 and %d", int(webLoginMaxTTL.Seconds()))
		}
	}
	now := s.cfg.Clock.Now()
	if c.dev {
		writeJSON(w, http.StatusOK, proto.WebLogin{Path: "/ui/", Operator: c.actor(), Role: RoleApprover, Expires: now.Add(ttl).UTC()})
		return nil
	}
	token := newSecret()
	l := store.WebLogin{TokenHash: hashHex(token), Operator: c.operator.Name, KeyHash: s.ids.operatorKeyHash(c.operator.Name),
		Expires: now.Add(ttl), SessionTTL: s.cfg.WebSessionTTL}
	if err := s.st.AddWebLogin(r.Context(), l); err != nil {
		return s.internal("recording a dashboard login", err)
	}
	s.log.Info("dashboard login link issued", "operator", c.operator.Name, "expires", l.Expires)
	writeJSON(w, http.StatusOK, proto.WebLogin{Path: "/ui/login?token=" + url.QueryEscape(token), Operator: c.operator.Name,
		Role: c.operator.Role, Expires: l.Expires.UTC()})
	return nil
}

// webRedeem is GET /ui/login?token=…: the one-time token becomes a
// session cookie, once, and the browser goes on to the overview.
func (s *Server) webRedeem(w http.ResponseWriter, r *http.Request) *apiError {
	if s.cfg.InsecureDev {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return nil
	}
	// A link opened from another site's page would sign the browser in
	// as whoever made the link (login CSRF): links are opened directly,
	// by `nixfleet ui` or pasted, which browsers send as "none".
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return errorf(codes.CsrfRefused, "a sign-in link must be opened directly, not followed from another site")
	}
	token := r.URL.Query().Get("token")
	if token == "" || len(token) > 100 {
		return errorf(codes.LoginLinkInvalid, "this sign-in link has no valid token; run `nixfleet ui` for a new one")
	}
	secret := newSecret()
	sess, err := s.st.RedeemWebLogin(r.Context(), hashHex(token), hashHex(secret), s.cfg.Clock.Now())
	if errors.Is(err, store.ErrNotFound) {
		return errorf(codes.LoginLinkInvalid, "this sign-in link is unknown, expired or already used; run `nixfleet ui` for a new one")
	}
	if err != nil {
		return s.internal("redeeming a dashboard login", err)
	}
	if _, ok := s.ids.operatorByName(sess.Operator, sess.KeyHash); !ok {
		_ = s.st.EndWebSession(r.Context(), sess.Hash)
		return errorf(codes.SignInRequired, "operator %s is no longer in the operators file with the key that asked for this link", sess.Operator)
	}
	if old, err := r.Cookie(webCookie); err == nil && old.Value != "" && len(old.Value) <= 100 {
		_ = s.st.EndWebSession(r.Context(), hashHex(old.Value)) // the browser's previous session ends
	}
	http.SetCookie(w, &http.Cookie{Name: webCookie, Value: secret, Path: "/", Expires: sess.Expires,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	s.log.Info("dashboard session started", "operator", sess.Operator, "expires", sess.Expires)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	return nil
}

// webIdentify returns the user of a dashboard request: everybody under
// --insecure-dev, else the holder of a live session of an operator who is
// still in the operators file with the same key (a new operators file
// ends the sessions of the operators it drops or re-keys; the role is the
// file's, now).
func (s *Server) webIdentify(r *http.Request) (webUser, *apiError) {
	if s.cfg.InsecureDev {
		return webUser{Name: "insecure-dev", Role: RoleApprover, Dev: true, CSRF: s.devCSRF}, nil
	}
	ck, err := r.Cookie(webCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return webUser{}, errorf(codes.SignInRequired, "not signed in: run `nixfleet ui` to open the dashboard signed in")
	}
	hash := hashHex(ck.Value)
	sess, err := s.st.WebSession(r.Context(), hash, s.cfg.Clock.Now())
	if errors.Is(err, store.ErrNotFound) {
		return webUser{}, errorf(codes.SignInRequired, "the dashboard session ended or expired: run `nixfleet ui` to sign in again")
	}
	if err != nil {
		return webUser{}, s.internal("reading a dashboard session", err)
	}
	op, ok := s.ids.operatorByName(sess.Operator, sess.KeyHash)
	if !ok {
		return webUser{}, errorf(codes.SignInRequired, "operator %s is no longer in the operators file with the key that signed in", sess.Operator)
	}
	return webUser{Name: op.Name, Role: op.Role, CSRF: csrfFor(ck.Value), Expires: sess.Expires, hash: hash}, nil
}

// checkCSRF refuses a state-changing dashboard request that another site
// may have made: the browser must say it comes from this origin (when it
// says where it comes from at all), and the form must carry the session's
// token.
func checkCSRF(r *http.Request, u webUser) *apiError {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return errorf(codes.CsrfRefused, "a %s request may not change anything", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		o, err := url.Parse(origin)
		if err != nil || o.Host != r.Host {
			return errorf(codes.CsrfRefused, "the request comes from %q, not from this dashboard", origin)
		}
	}
	token := r.PostFormValue("csrf")
	if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(u.CSRF)) != 1 {
		return errorf(codes.CsrfRefused, "the form's CSRF token is missing or not this session's; reload the page")
	}
	return nil
}

// webLogout is POST /ui/logout: the session ends at once, on every
// replica.
func (s *Server) webLogout(w http.ResponseWriter, r *http.Request, u webUser) *apiError {
	if !u.Dev {
		if err := s.st.EndWebSession(r.Context(), u.hash); err != nil {
			return s.internal("ending a dashboard session", err)
		}
		http.SetCookie(w, &http.Cookie{Name: webCookie, Value: "", Path: "/", MaxAge: -1,
			Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		s.log.Info("dashboard session ended", "operator", u.Name)
	}
	http.Redirect(w, r, "/ui/signed-out", http.StatusSeeOther)
	return nil
}
