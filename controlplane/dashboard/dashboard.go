// Package dashboard is the control plane's web dashboard (rfcs/0011):
// HTML pages under /ui/ on the API's own listener, made with html/template
// from the same views as the operator API, kept live by a stream of the
// journal (/ui/events, Server-Sent Events), with forms that file the same
// intents as the CLI.
//
// It holds no state of the fleet. What it shows it asks the engine for
// (Engine: the API's views, which read the hub's kept assignments, never
// a fleet-sized read per page) and reads the journal, the release log and
// the sign-in sessions from the store (Store). What it changes it files as
// an intent, through the engine, as the API does.
package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Engine is what the dashboard asks the control plane. Its errors are
// *codes.Error (an error of another type is answered as internal).
type Engine interface {
	// Admit rate-limits a request by its address, before anything else
	// is read; an error refuses it (having set Retry-After).
	Admit(w http.ResponseWriter, r *http.Request) error
	// Operator is the user of a session of operator name signed in with
	// the key of hash keyHash: false when the operators file no longer
	// holds that operator with that key.
	Operator(name, keyHash string) (User, bool)
	// MayFile refuses an intent of kind that the user's role may not
	// file.
	MayFile(u User, kind string) error

	// Status is GET /v1/status, with each channel's latest rollout (its
	// header: its hosts are counted in the status, not read).
	Status(r *http.Request) (proto.Status, map[string]reconciler.Rollout, error)
	// Rollout is the rollout the path's {id} names, with its hosts, as
	// the API's view of it, and whether it is its channel's latest.
	Rollout(r *http.Request) (reconciler.Rollout, proto.Rollout, bool, error)
	// Host is the API's view of a host.
	Host(r *http.Request, name string, now time.Time) (proto.HostView, error)
	// Intent is a filed intent and its result (store.ErrNotFound when
	// none), with the rollout it is about.
	Intent(ctx context.Context, id string) (proto.IntentResponse, string, error)
	// IntentKind refuses an action that is no intent.
	IntentKind(kind string) error
	// File files an intent on the rollout the path's {id} names, as the
	// API does, and waits a little for the tick that decides it; sent is
	// false when the browser went away first.
	File(r *http.Request, f Filing) (rolloutID, intentID string, sent bool, err error)

	// Occupancy is how much of each budget the fleet uses now.
	Occupancy(budgets []proto.RolloutBudget) []proto.BudgetUse
	// Covers reports, for each budget, whether it counts a host of the
	// channel: one that the hub's assignments put in a rollout of it.
	Covers(channel string, budgets []proto.RolloutBudget) []bool
	// FollowSignal is closed when the journal may have new events;
	// EventMark is a count that moves when it has.
	FollowSignal() <-chan struct{}
	EventMark() int64
}

// Filing is an intent a form files.
type Filing struct {
	Kind, Actor, Comment string
	Wave                 *int // approve's
}

// Store is what the dashboard reads from the store itself.
type Store interface {
	Watermark(ctx context.Context) (store.Watermark, error)
	Forecast(ctx context.Context, rolloutID string) (store.Forecast, error)
	Measurements(ctx context.Context, rolloutID string, wave int) ([]reconciler.Measurement, error)
	Events(ctx context.Context, q proto.EventQuery) ([]proto.Event, error)
	ReleaseLog(ctx context.Context, q store.ReleaseQuery) ([]proto.Release, error)
	RedeemWebLogin(ctx context.Context, tokenHash, sessionHash string, now time.Time) (store.WebSession, error)
	WebSession(ctx context.Context, hash string, now time.Time) (store.WebSession, error)
	EndWebSession(ctx context.Context, hash string) error
}

// Config is a dashboard's parts.
type Config struct {
	Engine Engine
	Store  Store
	Clock  clock.Clock
	Log    *slog.Logger
	// InsecureDev serves everybody as an approver, under loopback names
	// only (--insecure-dev).
	InsecureDev bool
	// Stopping closes when the server shuts down: streams end.
	Stopping <-chan struct{}
}

// Dashboard serves the pages.
type Dashboard struct {
	engine      Engine
	st          Store
	clock       clock.Clock
	log         *slog.Logger
	insecureDev bool
	stopping    <-chan struct{}
	devCSRF     string     // --insecure-dev's CSRF token, random per process
	streams     webStreams // open streams, per user
}

// New makes a dashboard.
func New(c Config) *Dashboard {
	return &Dashboard{engine: c.Engine, st: c.Store, clock: c.Clock, log: c.Log, insecureDev: c.InsecureDev,
		stopping: c.Stopping, devCSRF: NewSecret()}
}

// maxForm bounds a form's body, as the API bounds an intent's.
const maxForm = 16 << 10

// coded is d.internal(what, err), nil for a nil err.
func (d *Dashboard) coded(what string, err error) *codes.Error {
	if err == nil {
		return nil
	}
	return d.internal(what, err)
}

// internal is an error of the engine or the store as the dashboard
// answers it: a coded error as it is, a cancelled request as
// unavailable, anything else logged and answered as internal.
func (d *Dashboard) internal(what string, err error) *codes.Error {
	var ce *codes.Error
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return codes.Errorf(codes.Unavailable, "%s: %v", what, err)
	}
	d.log.Error(what, "err", err)
	return codes.Errorf(codes.Internal, "%s failed; see the control plane's log", what)
}

// writeError answers an error as JSON, as the API does.
func writeError(w http.ResponseWriter, e *codes.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status())
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(proto.Error{Code: string(e.Code), Message: e.Message})
}

//go:embed web
var webFS embed.FS

// webAssets are the dashboard's static files and their version: a hash of
// their contents, added to their URLs so that browsers may cache them.
var webAssets, webAssetVersion = func() (fs.FS, string) {
	sub, err := fs.Sub(webFS, "web/static")
	if err != nil {
		panic(err)
	}
	h := sha256.New()
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(sub, p)
			h.Write([]byte(p))
			h.Write(b)
		}
		return nil
	})
	return sub, hex.EncodeToString(h.Sum(nil))[:12]
}()

// webTemplates are the pages; each page defines "main" and renders in
// "layout".
var webTemplates = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"stateClass": stateClass,
		"ago":        ago,
		"when":       func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
		"iso":        func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"short":      shortHash,
		"until":      until,
		"pct":        func(n, total int) string { return strconv.FormatFloat(pct(n, total), 'f', 2, 64) },
		"add":        func(a, b int) int { return a + b },
		"asset":      func(name string) string { return "/ui/static/" + name + "?v=" + webAssetVersion },
		"urlPath":    urlPath,
		"row":        func(e proto.Event, rollout bool) eventRow { return eventRow{e, rollout} },
		"buttonName": buttonName,
		"shown":      func(r *proto.Rollout) string { return reconciler.ShownState(r.State, r.Reason.Code) },
		"outcome":    reconciler.ShownOutcome,
		"shownState": reconciler.ShownState,
		"codeWords":  codeWords,
		"shortID":    proto.ShortRolloutID,
		"offTarget":  func(r *proto.Rollout) string { return reconciler.OffTarget(r.State, r.Counts) },
		"full":       full,
		"span":       span,
	}
	out := map[string]*template.Template{}
	for _, page := range []string{"overview", "rollout", "host", "releases", "error"} {
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/layout.html", "web/"+page+".html"))
		out[page] = t
	}
	return out
}()

// eventRow is a journal line; Rollout says whether it names its rollout
// (not on the rollout's own page).
type eventRow struct {
	E       proto.Event
	Rollout bool
}

// webAccess is what a dashboard route needs.
type webAccess int

const (
	webRead webAccess = iota // a signed-in user (or --insecure-dev)
	webPost                  // a signed-in user, with a same-origin form carrying the CSRF token
	webAct                   // as webPost, and the user's role must file the route's {action} (mayFile)
	webOpen                  // nobody: sign-in, signed out, static files
)

// webHandler is a dashboard handler: it gets the signed-in user (zero
// for webOpen routes).
type webHandler func(w http.ResponseWriter, r *http.Request, u User) *codes.Error

// Routes gives each of the dashboard's routes to handle: its pattern
// (also its name in metrics) and its handler.
func (d *Dashboard) Routes(handle func(pattern string, h http.Handler)) {
	routes := []struct {
		pattern string
		h       webHandler
		acc     webAccess
	}{
		{"GET /ui/{$}", d.webOverview, webRead},
		{"GET /ui/rollouts/{id}", d.webRollout, webRead},
		{"GET /ui/hosts/{name}", d.webHost, webRead},
		{"GET /ui/releases", d.webReleases, webRead},
		{"GET /ui/events", d.webEvents, webRead},
		{"POST /ui/rollouts/{id}/{action}", d.webIntent, webAct},
		{"POST /ui/logout", d.webLogout, webPost},
		{"GET /ui/login", func(w http.ResponseWriter, r *http.Request, _ User) *codes.Error { return d.webRedeem(w, r) }, webOpen},
		{"GET /ui/signed-out", d.webSignedOut, webOpen},
		{"GET /ui/static/{file}", d.webStatic, webOpen},
		{"/ui/", d.webNotFound, webOpen},
	}
	for _, rt := range routes {
		handle(rt.pattern, d.wrap(rt.h, rt.acc))
	}
	handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
}

// wrap sets the dashboard's security headers, rate-limits by address,
// identifies the user, checks the role and the CSRF token of
// state-changing requests, runs the handler, and renders its error as a
// page.
func (d *Dashboard) wrap(h webHandler, acc webAccess) http.Handler {
	return http.HandlerFunc(func(rec http.ResponseWriter, r *http.Request) {
		hd := rec.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: with no-referrer a browser sends
		// "Origin: null" on form posts, which checkCSRF refuses.
		hd.Set("Referrer-Policy", "same-origin")
		var (
			u User
			e *codes.Error
		)
		// Limited by address before anything is read: a flood of made-up
		// cookies costs no session lookups.
		e = d.coded("admitting a request", d.engine.Admit(rec, r))
		if e == nil && d.insecureDev && !loopbackHost(r.Host) {
			// --insecure-dev authenticates nobody: a page of another site
			// whose name resolves to 127.0.0.1 (DNS rebinding) would pass
			// the same-origin checks, so only loopback names are served.
			e = codes.Errorf(codes.Forbidden, "--insecure-dev serves the dashboard under loopback names only (localhost, 127.0.0.1, [::1]), not %q", r.Host)
		}
		if e == nil && acc != webOpen {
			u, e = d.identify(r)
		}
		if e == nil && (acc == webPost || acc == webAct) {
			if r.Body != nil {
				r.Body = http.MaxBytesReader(rec, r.Body, maxForm)
			}
			var tooBig *http.MaxBytesError
			if err := r.ParseForm(); errors.As(err, &tooBig) {
				e = codes.Errorf(codes.BodyTooLarge, "the form exceeds %d bytes", maxForm)
			} else if err != nil {
				e = codes.Errorf(codes.BadRequest, "the form cannot be read: %v", err)
			} else if e = checkCSRF(r, u); e == nil && acc == webAct {
				e = d.coded("checking a role", d.engine.MayFile(u, r.PathValue("action")))
			}
		}
		if e == nil {
			e = h(rec, r, u)
		}
		if e != nil {
			d.webError(rec, r, u, e)
		}
	})
}

// loopbackHost reports whether a Host header names this machine's
// loopback: localhost, 127.0.0.0/8 or [::1], with any port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// webError answers an error: a page for people, JSON for the event
// stream and for scripts that ask for it.
func (d *Dashboard) webError(w http.ResponseWriter, r *http.Request, u User, e *codes.Error) {
	if r.URL.Path == "/ui/events" || strings.Contains(r.Header.Get("Accept"), "application/json") {
		writeError(w, e)
		return
	}
	data := errorPage{webPage: webPage{Title: http.StatusText(e.Status()), User: u}, Code: string(e.Code), Message: e.Message, Status: e.Status()}
	// A session cookie is SameSite=Strict: a link followed from another
	// site (a chat, an alert) arrives without it. The page reloads itself
	// once, from this site, when the cookie is then sent.
	data.Retry = e.Code == codes.SignInRequired && r.Method == http.MethodGet && r.Header.Get("Sec-Fetch-Site") == "cross-site"
	d.render(w, e.Status(), "error", &data)
}

// errorPage is an error, or the signed-out page: the code (none for the
// latter), the message, the HTTP status, and whether the page reloads
// itself once (see webError).
type errorPage struct {
	webPage
	Code, Message string
	Status        int
	Retry         bool
}

// webPage is what every page shows around its content.
type webPage struct {
	Title string
	User  User
	// Nav is the navigation entry of the page: "fleet" or "releases".
	Nav string
	// Live pages follow /ui/events with the query Stream ("": every
	// event), after After, the newest event id the page shows.
	Live   bool
	Stream string
	After  int64
	// Now is when the page was made.
	Now time.Time
}

// page starts a live page: the newest event id is read before anything
// the page shows, so that its stream misses nothing.
func (d *Dashboard) page(r *http.Request, u User, title, nav, stream string) (webPage, *codes.Error) {
	wm, err := d.st.Watermark(r.Context())
	if err != nil {
		return webPage{}, d.internal("reading the journal's watermark", err)
	}
	return webPage{Title: title, User: u, Nav: nav, Live: true, Stream: stream, After: wm.Events, Now: d.clock.Now()}, nil
}

// render executes a page into a buffer first, so that a template error is
// a clean 500, not half a page.
func (d *Dashboard) render(w http.ResponseWriter, status int, page string, data any) {
	var buf bytes.Buffer
	if err := webTemplates[page].Execute(&buf, data); err != nil {
		d.log.Error("rendering a dashboard page", "page", page, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// webStatic serves the embedded CSS and JS.
func (d *Dashboard) webStatic(w http.ResponseWriter, r *http.Request, _ User) *codes.Error {
	name := r.PathValue("file")
	b, err := fs.ReadFile(webAssets, name)
	if err != nil || strings.Contains(name, "/") {
		return codes.Errorf(codes.NotFound, "no dashboard file %q", name)
	}
	types := map[string]string{".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
	ct, ok := types[path.Ext(name)]
	if !ok {
		return codes.Errorf(codes.NotFound, "no dashboard file %q", name)
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(b)
	return nil
}

func (d *Dashboard) webNotFound(w http.ResponseWriter, r *http.Request, _ User) *codes.Error {
	return codes.Errorf(codes.NotFound, "the dashboard has no page %s", r.URL.Path)
}

// webSignedOut is the page after signing out.
func (d *Dashboard) webSignedOut(w http.ResponseWriter, _ *http.Request, _ User) *codes.Error {
	data := errorPage{webPage: webPage{Title: "Signed out"}, Message: "You are signed out. Run `nixfleet ui` to sign in again.", Status: http.StatusOK}
	d.render(w, http.StatusOK, "error", &data)
	return nil
}

// webOverview is GET /ui/: every channel, its latest rollout with its
// waves, budgets and what holds it.
func (d *Dashboard) webOverview(w http.ResponseWriter, r *http.Request, u User) *codes.Error {
	p, e := d.page(r, u, "Fleet", "fleet", "")
	if e != nil {
		return e
	}
	st, full, err := d.engine.Status(r)
	if err != nil {
		return d.internal("reading the status", err)
	}
	data := struct {
		webPage
		Status   proto.Status
		Channels []channelCard
		Intent   *proto.IntentResponse
	}{webPage: p, Status: st}
	for _, cs := range st.Channels {
		card := channelCard{ChannelStatus: cs}
		if ro, ok := full[cs.Name]; ok && cs.Rollout != nil {
			card.Waves = waveBars(ro, cs.Rollout)
			if !ro.State.Terminal() && len(ro.Budgets) > 0 {
				card.Budgets, card.OtherBudgets = cardBudgets(d.engine.Occupancy(ro.Budgets), d.engine.Covers(cs.Name, ro.Budgets))
			}
			card.Actions = actionsFor(ro, true)
		}
		if cs.Pending {
			if card.Frozen, e = d.frozenRef(r, cs); e != nil {
				return e
			}
		}
		data.Channels = append(data.Channels, card)
	}
	// A break-freeze of a ref that did not open comes back here.
	if id := r.URL.Query().Get("intent"); id != "" && proto.Nameable(id) {
		if resp, _, err := d.engine.Intent(r.Context(), id); err == nil {
			data.Intent = &resp
		}
	}
	d.render(w, http.StatusOK, "overview", &data)
	return nil
}

// frozenRef returns a channel's ref that a freeze keeps from opening, as
// the release log holds it (deferred, reason freeze: rfcs/0003 rule 14);
// nil when there is none.
func (d *Dashboard) frozenRef(r *http.Request, cs proto.ChannelStatus) (*proto.Release, *codes.Error) {
	rels, err := d.st.ReleaseLog(r.Context(), store.ReleaseQuery{Channel: cs.Name})
	if err != nil {
		return nil, d.internal("reading the release log", err)
	}
	for _, rel := range rels {
		if rel.Ref == cs.Ref && rel.RolloutID != "" && rel.Fate == proto.FateDeferred && rel.Reason.Code == codes.Freeze {
			return &rel, nil
		}
	}
	return nil, nil
}

// channelCard is a channel on the overview. Frozen is its release that a
// freeze keeps from opening, which an approver may let through
// (break-freeze).
type channelCard struct {
	proto.ChannelStatus
	Waves []waveBar
	// Budgets are the budgets that matter to the channel's rollout now
	// (cardBudgets), OtherBudgets how many others count its hosts; both
	// are empty for a rollout that is over. The rollout page lists every
	// budget.
	Budgets      []proto.BudgetUse
	OtherBudgets int
	Actions      []string
	Frozen       *proto.Release
}

// cardBudgets picks the budgets a channel card shows: of the budgets that
// count a host of the channel (covers), those that bind (full: they hold
// any of their hosts that would be dispatched now) or have hosts in
// flight, anywhere in the fleet, which take their room; it counts the
// others of the channel. A budget that counts no host of the channel is
// not the card's business.
func cardBudgets(all []proto.BudgetUse, covers []bool) (shown []proto.BudgetUse, others int) {
	for i, u := range all {
		switch {
		case i >= len(covers) || !covers[i]:
		case u.InFlight > 0 || full(u):
			shown = append(shown, u)
		default:
			others++
		}
	}
	return shown, others
}

// full reports whether a budget has as many hosts in flight as it allows.
func full(u proto.BudgetUse) bool { return u.InFlight >= u.Limit }

// waveBar is a wave's progress: its hosts counted by how far they are.
type waveBar struct {
	Index, Total                           int
	Name                                   string
	Converged, InFlight, Failed, Remaining int
	Other                                  int // skipped, deferred, reverted
	Current                                bool
	SoakMinutes                            int
}

// Label is how people call the wave: "wave 1 (canary)".
func (b waveBar) Label() string {
	if b.Name != "" {
		return fmt.Sprintf("wave %d (%s)", b.Index, b.Name)
	}
	return fmt.Sprintf("wave %d", b.Index)
}

// segment is a part of a progress bar, in percent of its width.
type segment struct {
	Class, Label string
	X, W         string
}

// Segments are the bar's parts, left to right: converged, in flight,
// failed, other; what remains is the bar's background.
func (b waveBar) Segments() []segment {
	var out []segment
	x := 0.0
	for _, p := range []struct {
		n            int
		class, label string
	}{{b.Converged, "st-ok", "converged"}, {b.InFlight, "st-busy", "in flight"}, {b.Failed, "st-bad", "failed"}, {b.Other, "st-idle", "skipped, deferred or reverted"}} {
		if p.n == 0 {
			continue
		}
		w := pct(p.n, b.Total)
		out = append(out, segment{Class: p.class, Label: fmt.Sprintf("%d %s", p.n, p.label),
			X: strconv.FormatFloat(x, 'f', 2, 64), W: strconv.FormatFloat(w, 'f', 2, 64)})
		x += w
	}
	return out
}

// Summary is the bar as text, for everyone who does not see its colours.
func (b waveBar) Summary() string {
	parts := []string{fmt.Sprintf("%d of %d converged", b.Converged, b.Total)}
	for _, p := range []struct {
		n     int
		label string
	}{{b.InFlight, "in flight"}, {b.Failed, "failed"}, {b.Remaining, "pending"}, {b.Other, "skipped, deferred or reverted"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.label))
		}
	}
	return strings.Join(parts, ", ")
}

// waveBars are a rollout's waves, their hosts counted as the view counts
// them (proto.Rollout.WaveCounts): no host is read.
func waveBars(ro reconciler.Rollout, sum *proto.Rollout) []waveBar {
	bars := make([]waveBar, len(sum.Waves))
	for i, wv := range sum.Waves {
		b := &bars[i]
		*b = waveBar{Index: i, Name: wv.Name, SoakMinutes: wv.SoakMinutes, Current: i == ro.Wave && !ro.State.Terminal()}
		if i >= len(sum.WaveCounts) {
			continue
		}
		for state, n := range sum.WaveCounts[i] {
			b.Total += n
			switch st := reconciler.HostState(state); {
			case st == reconciler.HostConverged:
				b.Converged += n
			case st.InFlight():
				b.InFlight += n
			case st == reconciler.HostFailed:
				b.Failed += n
			case st == reconciler.HostPending:
				b.Remaining += n
			default:
				b.Other += n
			}
		}
	}
	return bars
}

// actionsFor are the intents a rollout in its state would take now:
// the dashboard offers only those (the tick decides anyway).
func actionsFor(ro reconciler.Rollout, latest bool) []string {
	var out []string
	for _, kind := range []string{reconciler.IntentPause, reconciler.IntentResume, reconciler.IntentCancel, reconciler.IntentRollback} {
		if kind == reconciler.IntentRollback && !latest {
			continue
		}
		if ro.State.Takes(kind) {
			out = append(out, kind)
		}
	}
	return out
}

// Rollout pages show each host as a tile up to tileLimit hosts in a wave;
// a bigger wave shows a tile per state and per situation, and the hosts
// that need attention, up to attentionLimit.
const (
	tileLimit      = 300
	attentionLimit = 60
	journalTail    = 40
)

// waveView is a wave on the rollout page.
type waveView struct {
	waveBar
	Hosts     []proto.RolloutHost // every host, when the wave is small
	Aggregate bool
	States    []stateCount // by state, when the wave is big
	Codes     []stateCount // by situation code, when the wave is big
	Attention []proto.RolloutHost
	More      int // hosts needing attention beyond Attention
	// Analyses are the canary analysis runs of the wave (rfcs/0003 rule
	// 16); Comparisons the latest comparison each took.
	Analyses    []proto.AnalysisRun
	Comparisons []comparisonView
}

type stateCount struct {
	Name  string
	Count int
}

// webRollout is GET /ui/rollouts/{id}.
func (d *Dashboard) webRollout(w http.ResponseWriter, r *http.Request, u User) *codes.Error {
	id := r.PathValue("id")
	p, e := d.page(r, u, "Rollout "+id, "fleet", url.Values{"rollout": {id}}.Encode())
	if e != nil {
		return e
	}
	ro, sum, latest, err := d.engine.Rollout(r)
	if err != nil {
		return d.internal("reading a rollout", err)
	}
	evs, err := d.st.Events(r.Context(), proto.EventQuery{RolloutID: ro.ID, Limit: journalTail, Newest: true})
	if err != nil {
		return d.internal("reading events", err)
	}
	data := rolloutPage{webPage: p, R: sum, Budgets: d.engine.Occupancy(ro.Budgets), Actions: actionsFor(ro, latest), Events: reversed(evs)}
	data.Next = reconciler.NextStepSaid(ro, data.say(ro))
	data.Forecast = d.forecast(r.Context(), ro)
	bars := waveBars(ro, &sum)
	data.Approvals, data.BreakFreeze = changeControl(ro, bars)
	for _, b := range bars {
		data.Waves = append(data.Waves, waveView{waveBar: b, Aggregate: b.Total > tileLimit})
	}
	for _, a := range sum.Analyses {
		if a.Wave >= 0 && a.Wave < len(data.Waves) {
			data.Waves[a.Wave].Analyses = append(data.Waves[a.Wave].Analyses, a)
		}
	}
	for i := range data.Waves {
		if len(data.Waves[i].Analyses) > 0 && slices.ContainsFunc(ro.HealthGate.Analysis, func(a proto.Analysis) bool { return a.Compare != nil }) {
			data.Waves[i].Comparisons = d.comparisons(r.Context(), ro, i)
		}
	}
	states, sits := make([]map[string]int, len(data.Waves)), make([]map[string]int, len(data.Waves))
	for _, h := range sum.Hosts {
		if h.Wave < 0 || h.Wave >= len(data.Waves) {
			continue
		}
		wv := &data.Waves[h.Wave]
		if !wv.Aggregate {
			wv.Hosts = append(wv.Hosts, h)
			continue
		}
		if states[h.Wave] == nil {
			states[h.Wave], sits[h.Wave] = map[string]int{}, map[string]int{}
		}
		states[h.Wave][h.State]++
		if h.Situation != nil {
			sits[h.Wave][h.Situation.Code]++
		}
		if needsAttention(h) {
			if len(wv.Attention) < attentionLimit {
				wv.Attention = append(wv.Attention, h)
			} else {
				wv.More++
			}
		}
	}
	for i := range data.Waves {
		if data.Waves[i].Aggregate {
			data.Waves[i].States = ordered(states[i], stateOrder)
			data.Waves[i].Codes = ordered(sits[i], nil)
		}
	}
	if id := r.URL.Query().Get("intent"); id != "" && proto.Nameable(id) {
		if resp, about, err := d.engine.Intent(r.Context(), id); err == nil && about == ro.ID {
			data.Intent = &resp
		}
	}
	d.render(w, http.StatusOK, "rollout", &data)
	return nil
}

// rolloutPage is what the rollout page shows.
type rolloutPage struct {
	webPage
	R       proto.Rollout
	Waves   []waveView
	Budgets []proto.BudgetUse
	// Actions are the intents of actionsFor; Approvals the waves with an
	// approval gate; BreakFreeze is set when a freeze holds hosts of the
	// rollout and no approver broke it yet. The buttons each needs are
	// shown by role (User.CanAct, CanApprove).
	Actions     []string
	Approvals   []waveApproval
	BreakFreeze bool
	Events      []proto.Event
	Intent      *proto.IntentResponse
	// Next is the rollout's next step as this page says it (say).
	Next string
	// Forecast is the rollout's latest forecast on a time axis; nil when
	// it has none, or is over.
	Forecast *forecastView
}

// say is how the page says an action of a next step: the button it
// offers this user ("press Resume"), else the CLI command; nothing for
// nixfleet rollout show, since the page shows what it prints.
func (p *rolloutPage) say(ro reconciler.Rollout) reconciler.Say {
	cli := reconciler.Commands(ro)
	return func(verb string) string {
		switch {
		case verb == "show":
			return ""
		case p.HasActions() && containsString(p.Actions, verb):
			return "press " + buttonName(verb)
		}
		return cli(verb)
	}
}

// buttonName is the name of an action's button: "Resume".
func buttonName(kind string) string { return strings.ToUpper(kind[:1]) + kind[1:] }

// waveApproval is a wave of a rollout with an approval gate, or with
// approvals: who approved it so far, in order, and how many it needs.
// Waiting says that the gate holds hosts of it now (a Pending host blocked
// by gate approval, rfcs/0003): only then is approving offered.
type waveApproval struct {
	Wave    int
	Label   string
	Need    int
	By      []string
	Waiting bool
}

// Progress is the approvals so far: "1 of 2: alice".
func (a waveApproval) Progress() string {
	out := fmt.Sprintf("%d of %d", len(a.By), a.Need)
	if a.Need == 0 { // the gate is not in the rollout's waves: say what was given
		out = fmt.Sprintf("%d", len(a.By))
	}
	if len(a.By) > 0 {
		out += ": " + strings.Join(a.By, ", ")
	}
	return out
}

// Approved reports whether a user is among the wave's approvers.
func (a waveApproval) Approved(name string) bool { return containsString(a.By, name) }

// Offers are the waves the page offers its user to approve: those waiting
// for approval, to an approver who has not approved them yet.
func (p *rolloutPage) Offers() []waveApproval {
	if !p.User.CanApprove() {
		return nil
	}
	var out []waveApproval
	for _, a := range p.Approvals {
		if a.Waiting && !a.Approved(p.User.Name) {
			out = append(out, a)
		}
	}
	return out
}

// OffersBreakFreeze reports whether the page offers its user to break the
// freeze that holds the rollout.
func (p *rolloutPage) OffersBreakFreeze() bool { return p.BreakFreeze && p.User.CanApprove() }

// HasActions reports whether the page offers its user any form; an
// approver's approvals and freeze breaks are signed with the CLI, and the
// page shows the commands instead (rfcs/0011 §Actions).
func (p *rolloutPage) HasActions() bool {
	return p.User.CanAct() && len(p.Actions) > 0
}

// changeControl is what the rollout page shows of a rollout's change
// control (rfcs/0003 rules 14, 15): its waves with an approval gate or
// approvals, and whether a freeze holds hosts that an approver could let
// through. A rollout that is over offers neither.
func changeControl(ro reconciler.Rollout, bars []waveBar) (approvals []waveApproval, breakFreeze bool) {
	waiting := map[int]bool{}
	for _, h := range ro.Hosts {
		if (h.State == reconciler.HostPending || h.State == reconciler.HostSkipped) && h.Blocked.Gate == codes.Freeze {
			breakFreeze = true
		}
		if h.State == reconciler.HostPending && h.Blocked.Gate == codes.Approval {
			waiting[h.Wave] = true
		}
	}
	live := !ro.State.Terminal()
	for i, wv := range ro.Waves {
		a := waveApproval{Wave: i, Label: fmt.Sprintf("wave %d", i), Need: wv.Approval.Need(), Waiting: live && waiting[i]}
		if i < len(bars) {
			a.Label = bars[i].Label()
		}
		for _, ap := range ro.Approvals {
			if ap.Wave == i {
				a.By = append(a.By, ap.Actor)
			}
		}
		if a.Need > 0 || len(a.By) > 0 || a.Waiting {
			approvals = append(approvals, a)
		}
	}
	return approvals, live && breakFreeze && ro.FreezeBreak == nil
}

// stateOrder is the order host states are listed in.
var stateOrder = func() []string {
	out := make([]string, len(reconciler.HostStates))
	for i, st := range reconciler.HostStates {
		out[i] = string(st)
	}
	return out
}()

// ordered lists counts in order's order, then the rest by count and name.
func ordered(m map[string]int, order []string) []stateCount {
	var out []stateCount
	for _, k := range order {
		if m[k] > 0 {
			out = append(out, stateCount{k, m[k]})
		}
	}
	var rest []stateCount
	for k, n := range m {
		if n > 0 && !containsString(order, k) {
			rest = append(rest, stateCount{k, n})
		}
	}
	sortCounts(rest)
	return append(out, rest...)
}

// needsAttention: a host an operator should look at in a big wave.
func needsAttention(h proto.RolloutHost) bool {
	switch reconciler.HostState(h.State) {
	case reconciler.HostFailed, reconciler.HostSkipped, reconciler.HostRollingBack:
		return true
	}
	return h.Situation != nil && !h.Situation.Moves && h.State != string(reconciler.HostConverged)
}

func reversed(evs []proto.Event) []proto.Event {
	out := make([]proto.Event, len(evs))
	for i, e := range evs {
		out[len(evs)-1-i] = e
	}
	return out
}

// webHost is GET /ui/hosts/{name}: its situation, what it runs, its target
// and its history across rollouts.
func (d *Dashboard) webHost(w http.ResponseWriter, r *http.Request, u User) *codes.Error {
	name := r.PathValue("name")
	p, e := d.page(r, u, "Host "+name, "fleet", url.Values{"host": {name}}.Encode())
	if e != nil {
		return e
	}
	hv, err := d.engine.Host(r, name, p.Now)
	if err != nil {
		return d.internal("reading a host", err)
	}
	evs, err := d.st.Events(r.Context(), proto.EventQuery{Host: name, Limit: 100, Newest: true})
	if err != nil {
		return d.internal("reading events", err)
	}
	data := struct {
		webPage
		H      proto.HostView
		Events []proto.Event
	}{webPage: p, H: hv, Events: reversed(evs)}
	d.render(w, http.StatusOK, "host", &data)
	return nil
}

// webReleases is GET /ui/releases: every ref seen and its fate.
func (d *Dashboard) webReleases(w http.ResponseWriter, r *http.Request, u User) *codes.Error {
	p, e := d.page(r, u, "Releases", "releases", "")
	if e != nil {
		return e
	}
	rels, err := d.st.ReleaseLog(r.Context(), store.ReleaseQuery{})
	if err != nil {
		return d.internal("reading the release log", err)
	}
	data := struct {
		webPage
		Releases []proto.Release
	}{webPage: p, Releases: rels}
	d.render(w, http.StatusOK, "releases", &data)
	return nil
}

// webIntent is POST /ui/rollouts/{id}/{action}: the form of an action
// button files the intent as the API would, with the comment the form
// requires (and, for approve, the wave in its hidden field), and the
// browser goes back to the rollout page, which shows the result; to the
// overview for a break-freeze of a ref that has not opened.
func (d *Dashboard) webIntent(w http.ResponseWriter, r *http.Request, u User) *codes.Error {
	kind := r.PathValue("action") // the role may file it (webAct)
	if e := d.coded("checking an action", d.engine.IntentKind(kind)); e != nil {
		return e
	}
	if reconciler.ForApprovers(kind) {
		// The audit requires approvals and freeze breaks to be signed
		// with the approver's key (rfcs/0007 §Signed intents), which a
		// browser does not hold.
		return codes.Errorf(codes.UnsignedIntent, "%s must be signed with your key: run nixfleet rollout %s", kind, kind)
	}
	comment := strings.TrimSpace(r.PostFormValue("comment"))
	if comment == "" {
		return codes.Errorf(codes.BadRequest, "say why in the comment: it goes into the journal with your name")
	}
	var wave *int
	if vs, ok := r.PostForm["wave"]; ok {
		n, err := strconv.Atoi(vs[0])
		if err != nil || len(vs) != 1 {
			return codes.Errorf(codes.BadRequest, "wave must be one wave's index, a whole number")
		}
		wave = &n
	}
	rollout, intent, sent, err := d.engine.File(r, Filing{Kind: kind, Actor: u.Name, Comment: comment, Wave: wave})
	if err != nil || !sent {
		return d.coded("filing an intent", err)
	}
	http.Redirect(w, r, "/ui/rollouts/"+urlPath(rollout)+"?intent="+intent, http.StatusSeeOther)
	return nil
}

// webEvents is GET /ui/events: the journal as Server-Sent Events, each
// with its id, from after the query's after (or the Last-Event-ID a
// reconnecting browser sends), filtered by rollout or host (rfcs/0011
// §Live updates). The stream reads the store only when the hub saw new
// events, so an open page costs nothing while nothing happens; a comment
// every 20 s keeps proxies from closing it, and the session is looked at
// again then, so that a stream ends within 20 s of a sign-out or expiry.
// A backlog of more than one read (a page asleep for hours) is skipped:
// the page is told to resync, which reloads it anyway.
func (d *Dashboard) webEvents(w http.ResponseWriter, r *http.Request, u User) *codes.Error {
	q := proto.EventQuery{RolloutID: r.URL.Query().Get("rollout"), Host: r.URL.Query().Get("host"), Limit: 500}
	for _, v := range []string{q.RolloutID, q.Host} {
		if !proto.Nameable(v) {
			return codes.Errorf(codes.BadRequest, "rollout and host must be UTF-8 without control characters")
		}
	}
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	if after != "" {
		n, err := strconv.ParseInt(after, 10, 64)
		if err != nil || n < 0 {
			return codes.Errorf(codes.BadRequest, "after and Last-Event-ID must be an event id")
		}
		q.AfterID = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return codes.Errorf(codes.Internal, "the connection cannot stream")
	}
	if !d.streams.open(u.Name) {
		w.Header().Set("Retry-After", "10")
		return codes.Errorf(codes.RateLimited, "%s has %d dashboard streams open on this replica already; close a tab", u.Name, maxWebStreams)
	}
	defer d.streams.done(u.Name)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 3000\n\n")
	flusher.Flush()
	send := func(format string, args ...any) bool {
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	read := int64(-1) // the hub's mark at the last read
	first := true
	// The session is looked at again, and a keep-alive sent, every
	// streamCheck whatever wakes the stream: new events come with every
	// git poll and tick, and must not put the check off.
	check := d.clock.Now().Add(streamCheck)
	for r.Context().Err() == nil {
		signal := d.engine.FollowSignal()
		if !u.Dev && !d.clock.Now().Before(u.Expires) { // no read needed
			send("event: signed-out\ndata: {}\n\n")
			return nil
		}
		if now := d.clock.Now(); !now.Before(check) {
			if e := d.stillSignedIn(r, u); e != nil {
				send("event: signed-out\ndata: {}\n\n")
				return nil
			}
			if !send(": still here\n\n") {
				return nil
			}
			check = now.Add(streamCheck)
		}
		if mark := d.engine.EventMark(); mark != read || first {
			read = mark
			evs, err := d.st.Events(r.Context(), q)
			if err != nil {
				return nil // the status line is sent; the browser reconnects
			}
			if first && len(evs) == q.Limit {
				// Too far behind to be worth replaying: start from now.
				wm, err := d.st.Watermark(r.Context())
				if err != nil {
					return nil
				}
				q.AfterID = wm.Events
				if !send("id: %d\nevent: resync\ndata: {}\n\n", wm.Events) {
					return nil
				}
				evs = nil
			}
			first = false
			var b strings.Builder
			for _, ev := range evs {
				q.AfterID = ev.ID
				data, _ := json.Marshal(ev)
				fmt.Fprintf(&b, "id: %d\nevent: journal\ndata: %s\n\n", ev.ID, data)
			}
			if b.Len() > 0 && !send("%s", b.String()) {
				return nil
			}
			if len(evs) == q.Limit {
				read = -1 // more to read at once
				continue
			}
		}
		t := d.clock.NewTimer(max(check.Sub(d.clock.Now()), 0))
		select {
		case <-signal:
		case <-t.C():
		case <-r.Context().Done():
		case <-d.stopping:
			t.Stop()
			return nil
		}
		t.Stop()
	}
	return nil
}

// streamCheck is how often an open dashboard stream looks at its session
// again and sends a keep-alive (rfcs/0011 §Live updates).
const streamCheck = 20 * time.Second

// stillSignedIn looks at a stream's session again: signed out, expired,
// or its operator dropped from the operators file.
func (d *Dashboard) stillSignedIn(r *http.Request, u User) *codes.Error {
	if u.Dev {
		return nil
	}
	if !d.clock.Now().Before(u.Expires) {
		return codes.Errorf(codes.SignInRequired, "the session expired")
	}
	_, e := d.identify(r)
	return e
}

// maxWebStreams bounds the dashboard streams one user may hold open on a
// replica (a page each).
const maxWebStreams = 32

// webStreams counts the open dashboard streams per user.
type webStreams struct {
	mu sync.Mutex
	n  map[string]int
}

func (ws *webStreams) open(user string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n == nil {
		ws.n = map[string]int{}
	}
	if ws.n[user] >= maxWebStreams {
		return false
	}
	ws.n[user]++
	return true
}

func (ws *webStreams) done(user string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n[user]--; ws.n[user] <= 0 {
		delete(ws.n, user)
	}
}

// forecastView is a forecast as the rollout page draws it: each wave a bar
// on one time axis, from when the forecast was made to the rollout's end
// (or the last time it names).
type forecastView struct {
	proto.Forecast
	Axis  time.Duration
	Waves []forecastBar
	// Moved: the first forecast's end was another.
	Moved bool
}

// forecastBar is one wave's bar: where it starts and how long it is, in
// percent of the axis.
type forecastBar struct {
	proto.ForecastWave
	Label         string
	Left, Width   string
	Starts, Dones string
}

// forecast reads a rollout's latest forecast for its page; nil when it
// has none or is over (an error reading it only leaves it out).
func (d *Dashboard) forecast(ctx context.Context, ro reconciler.Rollout) *forecastView {
	if ro.State.Terminal() {
		return nil
	}
	fc, err := d.st.Forecast(ctx, ro.ID)
	if err != nil {
		return nil
	}
	var f proto.Forecast
	if json.Unmarshal(fc.Body, &f) != nil {
		return nil
	}
	f.FirstMadeAt, f.FirstEnd = fc.FirstMadeAt, nil
	if !fc.FirstEnd.IsZero() {
		first := fc.FirstEnd
		f.FirstEnd = &first
	}
	end := f.MadeAt
	if f.End != nil {
		end = *f.End
	}
	for _, w := range f.Waves {
		for _, t := range []*time.Time{w.Start, w.Done} {
			if t != nil && t.After(end) {
				end = *t
			}
		}
	}
	v := &forecastView{Forecast: f, Axis: end.Sub(f.MadeAt)}
	v.Moved = (f.End == nil) != (f.FirstEnd == nil) || f.End != nil && f.FirstEnd != nil && !f.End.Equal(*f.FirstEnd)
	at := func(t time.Time) float64 {
		if v.Axis <= 0 {
			return 0
		}
		return 100 * float64(t.Sub(f.MadeAt)) / float64(v.Axis)
	}
	for i, w := range f.Waves {
		b := forecastBar{ForecastWave: w, Label: waveLabelOf(ro, i)}
		from, to := f.MadeAt, f.MadeAt
		if w.Start != nil {
			from = *w.Start
			b.Starts = span(w.Start.Sub(f.MadeAt))
		}
		switch {
		case w.Done != nil:
			to = *w.Done
			b.Dones = span(w.Done.Sub(f.MadeAt))
		case w.Start != nil:
			to = end
		}
		if w.Start != nil || w.Done != nil {
			b.Left = strconv.FormatFloat(at(from), 'f', 1, 64)
			b.Width = strconv.FormatFloat(max(at(to)-at(from), 0.5), 'f', 1, 64)
		}
		v.Waves = append(v.Waves, b)
	}
	return v
}

// waveLabelOf is "wave 1 (web)", or "wave 1" for a wave without a name.
func waveLabelOf(ro reconciler.Rollout, i int) string {
	if i < len(ro.Waves) && ro.Waves[i].Name != "" {
		return fmt.Sprintf("wave %d (%s)", i, ro.Waves[i].Name)
	}
	return fmt.Sprintf("wave %d", i)
}
