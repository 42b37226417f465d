package dashboard

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
)

// Sign-in (rfcs/0011 §Sign-in). An operator's CLI, authenticated
// by the operator's key like every API call, asks POST /v1/web/logins for
// a one-time token; the browser opens /ui/login?token=…, which redeems it
// once for a session cookie. The store keeps only hashes of the token and
// of the session secret, so that a database dump signs nobody in, and so
// that every replica knows every session.

// webCookie is the session cookie. The __Host- prefix makes browsers
// refuse it unless it is Secure, has Path=/ and no Domain.
const webCookie = "__Host-nixfleet-session"

// LoginPath is the path of the sign-in link that redeems token.
func LoginPath(token string) string { return "/ui/login?token=" + url.QueryEscape(token) }

// User is who sent a dashboard request.
type User struct {
	Name string
	Role string
	// Acts: the role may pause, resume, cancel and roll back; Approves:
	// it may also approve waves and break freezes.
	Acts, Approves bool
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
func (u User) CanAct() bool { return u.Dev || u.Acts }

// CanApprove reports whether the user may approve waves and break freezes:
// an approver.
func (u User) CanApprove() bool { return u.Dev || u.Approves }

// HashHex is the hex SHA-256 of a secret, as the store keeps it.
func HashHex(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// csrfFor derives a session's CSRF token from its secret: only a page
// served to the cookie's holder has it, and the server keeps nothing more.
func csrfFor(secret string) string { return HashHex("nixfleet csrf\x00" + secret) }

// NewSecret is 32 random bytes, base64url: a sign-in token or a session
// secret.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// webRedeem is GET /ui/login?token=…: the one-time token becomes a
// session cookie, once, and the browser goes on to the overview.
func (d *Dashboard) webRedeem(w http.ResponseWriter, r *http.Request) *codes.Error {
	if d.insecureDev {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return nil
	}
	// A link opened from another site's page would sign the browser in
	// as whoever made the link (login CSRF): links are opened directly,
	// by `nixfleet ui` or pasted, which browsers send as "none".
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return codes.Errorf(codes.CsrfRefused, "a sign-in link must be opened directly, not followed from another site")
	}
	token := r.URL.Query().Get("token")
	if token == "" || len(token) > 100 {
		return codes.Errorf(codes.LoginLinkInvalid, "this sign-in link has no valid token; run `nixfleet ui` for a new one")
	}
	secret := NewSecret()
	sess, err := d.st.RedeemWebLogin(r.Context(), HashHex(token), HashHex(secret), d.clock.Now())
	if errors.Is(err, store.ErrNotFound) {
		return codes.Errorf(codes.LoginLinkInvalid, "this sign-in link is unknown, expired or already used; run `nixfleet ui` for a new one")
	}
	if err != nil {
		return d.internal("redeeming a dashboard login", err)
	}
	if _, ok := d.engine.Operator(sess.Operator, sess.KeyHash); !ok {
		_ = d.st.EndWebSession(r.Context(), sess.Hash)
		return codes.Errorf(codes.SignInRequired, "operator %s is no longer in the operators file with the key that asked for this link", sess.Operator)
	}
	if old, err := r.Cookie(webCookie); err == nil && old.Value != "" && len(old.Value) <= 100 {
		_ = d.st.EndWebSession(r.Context(), HashHex(old.Value)) // the browser's previous session ends
	}
	http.SetCookie(w, &http.Cookie{Name: webCookie, Value: secret, Path: "/", Expires: sess.Expires,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	d.log.Info("dashboard session started", "operator", sess.Operator, "expires", sess.Expires)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	return nil
}

// identify returns the user of a dashboard request: everybody under
// --insecure-dev, else the holder of a live session of an operator who is
// still in the operators file with the same key (a new operators file
// ends the sessions of the operators it drops or re-keys; the role is the
// file's, now).
func (d *Dashboard) identify(r *http.Request) (User, *codes.Error) {
	if d.insecureDev {
		return User{Name: "insecure-dev", Role: "approver", Acts: true, Approves: true, Dev: true, CSRF: d.devCSRF}, nil
	}
	ck, err := r.Cookie(webCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return User{}, codes.Errorf(codes.SignInRequired, "not signed in: run `nixfleet ui` to open the dashboard signed in")
	}
	hash := HashHex(ck.Value)
	sess, err := d.st.WebSession(r.Context(), hash, d.clock.Now())
	if errors.Is(err, store.ErrNotFound) {
		return User{}, codes.Errorf(codes.SignInRequired, "the dashboard session ended or expired: run `nixfleet ui` to sign in again")
	}
	if err != nil {
		return User{}, d.internal("reading a dashboard session", err)
	}
	u, ok := d.engine.Operator(sess.Operator, sess.KeyHash)
	if !ok {
		return User{}, codes.Errorf(codes.SignInRequired, "operator %s is no longer in the operators file with the key that signed in", sess.Operator)
	}
	u.CSRF, u.Expires, u.hash = csrfFor(ck.Value), sess.Expires, hash
	return u, nil
}

// checkCSRF refuses a state-changing dashboard request that another site
// may have made: the browser must say it comes from this origin (when it
// says where it comes from at all), and the form must carry the session's
// token.
func checkCSRF(r *http.Request, u User) *codes.Error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return codes.Errorf(codes.CsrfRefused, "a %s request may not change anything", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		o, err := url.Parse(origin)
		if err != nil || o.Host != r.Host {
			return codes.Errorf(codes.CsrfRefused, "the request comes from %q, not from this dashboard", origin)
		}
	}
	token := r.PostFormValue("csrf")
	if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(u.CSRF)) != 1 {
		return codes.Errorf(codes.CsrfRefused, "the form's CSRF token is missing or not this session's; reload the page")
	}
	return nil
}

// webLogout is POST /ui/logout: the session ends at once, on every
// replica.
func (d *Dashboard) webLogout(w http.ResponseWriter, r *http.Request, u User) *codes.Error {
	if !u.Dev {
		if err := d.st.EndWebSession(r.Context(), u.hash); err != nil {
			return d.internal("ending a dashboard session", err)
		}
		http.SetCookie(w, &http.Cookie{Name: webCookie, Value: "", Path: "/", MaxAge: -1,
			Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		d.log.Info("dashboard session ended", "operator", u.Name)
	}
	http.Redirect(w, r, "/ui/signed-out", http.StatusSeeOther)
	return nil
}
