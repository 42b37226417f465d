package controlplane

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/dashboard"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// Server is one control plane replica: the channel source, the tick loop,
// the assignment hub and the HTTP API over one store (rfcs/0006).
type Server struct {
	cfg     Config
	st      store.Store
	roots   *trust.Roots
	ids     *identities
	src     *source
	ticker  *ticker
	hub     *hub
	m       *metrics
	limits  *rateLimits
	board   *board
	analyze *analyzer
	log     *slog.Logger
	replica string
	mux     *http.ServeMux
	// notifier sends the journal to webhook sinks (notifier.go).
	notifier *notify.Notifier
	// lot holds the parked long-polls (park.go); nil until Run serves.
	lot *lot
	// prefetch hands out fetch slots with check-in answers (prefetch.go).
	prefetch *prefetchSlots
	// statuses records the writes a tick must see, many to a commit
	// (statusbatch.go).
	statuses *statusBatcher

	// stopping closes when the HTTP server shuts down: streams end at
	// once instead of holding the shutdown for its whole grace period.
	stopping chan struct{}

	ready     chan struct{}
	readyOnce sync.Once
	ln        net.Listener
}

// New builds a replica: it loads the trust roots and operators, opens the
// store (migrating it), and the fleet repository.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	trustData, err := os.ReadFile(cfg.TrustFile)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	roots, err := trust.ParseRoots(trustData)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %s: %w", cfg.TrustFile, err)
	}
	ops, err := LoadOperators(cfg.OperatorsFile)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = "."
	}
	if cfg.DB == "" {
		cfg.DB = "sqlite://" + filepath.Join(cfg.StateDir, "nixfleet-cp.db")
	}
	pc, err := prom.NewSources(cfg.Prometheus, cfg.PrometheusSources)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	st, err := store.Open(ctx, cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	replica := cfg.ReplicaID
	if replica == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		host, _ := os.Hostname()
		replica = host + "-" + hex.EncodeToString(b[:])
	}
	m := newMetrics()
	s := &Server{cfg: cfg, st: st, roots: roots, ids: newIdentities(ops), m: m, log: log, replica: replica,
		board: newBoard(), ready: make(chan struct{}), stopping: make(chan struct{})}
	s.limits = newRateLimits(cfg, m, log.Warn)
	s.prefetch = newPrefetchSlots(cfg.PrefetchConcurrency, cfg.Clock.Now, m.reg)
	s.statuses = newStatusBatcher(st, m.statusBatch)
	s.src = newSource(cfg.Repo, cfg.StateDir, roots, st, cfg.Clock, log, m)
	s.src.watch, _ = CheckWatchRefs(cfg.WatchRefs) // checked by cfg.check
	s.src.ids, s.src.board, s.src.prom = s.ids, s.board, pc
	s.ticker = newTicker(st, &s.cfg, replica, log, m, s.board)
	if !cfg.NoForecasts {
		s.ticker.forecasts = newForecaster(st, log, m, reconciler.Model{Activation: cfg.ForecastActivation, Checkin: cfg.Tunables.CheckinPeriod()}, &s.ticker.kept)
	}
	s.analyze = newAnalyzer(st, pc, cfg.Clock, s.board, log, m.reg)
	s.ticker.measure = s.analyze.schedule
	s.ticker.leader.subscribe(func(_ store.Lease, leading bool) {
		if !leading {
			s.analyze.schedule(nil) // what it measured is the next leader's
		}
	})
	s.src.reacting = s.ticker.releaseBegins
	s.hub = newHub(st, log, m, cfg.Clock, s.board)
	s.ticker.leader.subscribe(func(_ store.Lease, leading bool) { s.hub.leading.Store(leading) })
	s.hub.inFleet = s.ids.inFleet
	s.hub.rewound = func() { s.src.forget(); s.ticker.rewound() }
	if err := s.newNotifier(); err != nil {
		st.Close()
		return nil, err
	}
	if err := s.src.open(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if err := s.loadIdentities(ctx); err != nil {
		st.Close()
		return nil, err
	}
	s.routes()
	return s, nil
}

// loadIdentities takes host keys from the newest stored release, before
// git is polled, so hosts can check in at once after a restart.
func (s *Server) loadIdentities(ctx context.Context) error {
	rels, err := s.st.Releases(ctx)
	if err != nil {
		return fmt.Errorf("controlplane: reading releases: %w", err)
	}
	var newest *store.Release
	for i := range rels {
		if newest == nil || rels[i].SignedAt.After(newest.SignedAt) {
			newest = &rels[i]
		}
	}
	if newest == nil {
		return nil
	}
	f, err := proto.DecodeFleetResolved(newest.FleetBody)
	if err != nil {
		return fmt.Errorf("controlplane: the stored fleet of %s: %w", newest.Channel, err)
	}
	s.ids.setHosts(f, newest.SignedAt)
	return nil
}

// Handler is the replica's HTTP API, for tests that serve it themselves.
func (s *Server) Handler() http.Handler { return s.mux }

// Addr is the address the replica listens on, once Run started.
func (s *Server) Addr() string {
	<-s.ready
	return s.ln.Addr().String()
}

// Run serves until ctx ends, then shuts down: the HTTP server stops
// accepting, the lease is given up, last-seen times are flushed.
func (s *Server) Run(ctx context.Context) error {
	defer s.st.Close()
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	if !s.cfg.InsecureDev {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
		if err != nil {
			ln.Close()
			return fmt.Errorf("controlplane: TLS: %w", err)
		}
		if browsersRefuse(cert) {
			s.log.Warn("the server certificate's key is Ed25519, which browsers do not accept: the dashboard will not open in one; use ECDSA P-256 (rfcs/0011)",
				"cert", s.cfg.TLSCert)
		}
		// Client certificates are self-signed by their host or operator key;
		// the key, not a CA, is the identity (checked per request).
		// A resumed session keeps the certificate of the handshake that
		// began it (rfcs/0007 §Authentication 6).
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
			ClientAuth: tls.RequestClientCert, VerifyConnection: s.countHandshake}
		ln = tls.NewListener(ln, srv.TLSConfig)
	} else {
		s.log.Warn("INSECURE DEV MODE: plain HTTP, no authentication; loopback only", "listen", ln.Addr().String())
	}
	s.ln = ln
	s.readyOnce.Do(func() { close(s.ready) })
	s.log.Info("control plane serving", "listen", ln.Addr().String(), "replica", s.replica, "store", s.st.Backend(),
		"repo", s.cfg.Repo, "insecureDev", s.cfg.InsecureDev)

	if err := s.hub.refresh(ctx); err != nil {
		s.log.Error("loading assignments", "err", err)
	}
	var wg sync.WaitGroup
	bg, stop := context.WithCancel(ctx)
	defer stop()
	wg.Add(5)
	go func() { defer wg.Done(); s.analyze.run(bg) }()
	go func() { defer wg.Done(); s.src.run(bg, s.cfg.PollInterval) }()
	go func() { defer wg.Done(); s.ticker.run(bg) }()
	go func() { defer wg.Done(); s.hub.run(bg) }()
	wg.Add(2)
	go func() { defer wg.Done(); s.notifier.Run(bg) }()
	go func() { defer wg.Done(); s.trimMemory(bg) }()
	go func() { defer wg.Done(); s.prune(bg) }()

	srv.RegisterOnShutdown(func() { close(s.stopping) })
	s.lot = newLot(srv, s.log, s.m.parked, s.m.httpRequests.WithLabelValues("POST /v1/agent/checkin", "200"))
	go s.lot.serve()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if err := s.loop(ctx, errc); err != nil {
		stop()
		wg.Wait()
		return fmt.Errorf("controlplane: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	s.lot.close()
	_ = s.lot.srv.Shutdown(sctx)
	stop()
	wg.Wait()
	return nil
}

// loop is the replica's one loop of reactions: what its parts post on the
// board (wake.go) becomes a tick or a reload, until ctx ends or the HTTP
// server fails.
func (s *Server) loop(ctx context.Context, errc <-chan error) error {
	// The service manager's watchdog hears from this loop itself: a loop
	// that stops reacting stops the keep-alives, and systemd restarts the
	// replica.
	var dog <-chan time.Time
	if every := s.cfg.Systemd.WatchdogEvery(); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		dog = t.C
	}
	ready := false
	for {
		select {
		case <-ctx.Done():
			s.tellSystemd("STOPPING=1")
			return nil
		case err := <-errc:
			return err
		case <-dog:
			s.tellSystemd("WATCHDOG=1")
		case <-s.board.ch:
			w := s.board.take()
			if w&wakePolled != 0 && !ready {
				// Started: the store answered (New opened and migrated
				// it) and the first read of the fleet repository ended.
				// One that failed is the log's and /readyz's to say; the
				// replica serves what the store holds meanwhile.
				ready = true
				status := "STATUS=serving"
				if polled, _ := s.src.status(); !polled {
					status += "; the fleet repository could not be read yet"
				}
				s.tellSystemd("READY=1\n" + status)
			}
			if w&wakeTick != 0 {
				s.ticker.kick()
			}
			if w&wakeTicked != 0 {
				s.hub.ticked(ctx, s.ticker.deltas.take())
			} else if w&(wakePolled|wakeQuiet) != 0 {
				s.hub.signal()
			}
		}
	}
}

// tellSystemd sends a state to the service manager, if one asked.
func (s *Server) tellSystemd(state string) {
	if err := s.cfg.Systemd.Notify(state); err != nil {
		s.log.Warn("telling the service manager", "state", state, "err", err)
	}
}

// prune deletes expired dashboard sessions, and old events and finished
// rollouts (unless retention is negative), every hour, on the leader.
func (s *Server) prune(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if _, leader := s.ticker.isLeader(); !leader {
				continue
			}
			if n, err := s.st.PruneWebSessions(ctx, s.cfg.Clock.Now()); err != nil {
				s.log.Error("pruning dashboard sessions", "err", err)
			} else if n > 0 {
				s.log.Info("pruned dashboard sessions", "rows", n)
			}
			s.pruneNotificationCursors(ctx)
			if s.cfg.EventRetention < 0 {
				continue
			}
			ev, ro, err := s.st.Prune(ctx, s.cfg.Clock.Now().Add(-s.cfg.EventRetention))
			if err != nil {
				s.log.Error("pruning", "err", err)
				continue
			}
			s.log.Info("pruned", "events", ev, "rollouts", ro)
			s.pruneHosts(ctx)
		}
	}
}

// pruneHosts forgets the hosts that left the signed fleet and were not
// heard from for the retention period (rfcs/0006 §Store 6): their rows,
// and what the hub keeps of them.
func (s *Server) pruneHosts(ctx context.Context) {
	inFleet, ok := s.ids.inFleet()
	if !ok {
		return // no fleet verified yet: no host is known to have left it
	}
	gone, err := s.hub.forgetPruned(func() ([]string, error) {
		return s.st.PruneHosts(ctx, inFleet, s.cfg.Clock.Now().Add(-s.cfg.EventRetention))
	})
	if err != nil {
		s.log.Error("pruning hosts that left the fleet", "err", err)
		return
	}
	if len(gone) > 0 {
		s.log.Info("forgot hosts that left the fleet", "hosts", len(gone), "first", gone[0])
	}
}

// handler is an API handler: it gets the authenticated client and returns
// an error for the client, or writes the response itself.
type handler func(w http.ResponseWriter, r *http.Request, c client) *codes.Error

// routes builds the API (rfcs/0007-protocol.md).
func (s *Server) routes() {
	s.mux = http.NewServeMux()
	api := map[string]handler{
		"POST /v1/agent/checkin":             s.checkin,
		"POST /v1/agent/confirm":             s.confirm,
		"POST /v1/agent/report":              s.report,
		"GET /v1/rollouts/{id}/manifest":     s.manifestFile(false),
		"GET /v1/rollouts/{id}/manifest.sig": s.manifestFile(true),
		"GET /v1/rollouts":                   s.listRollouts,
		"GET /v1/rollouts/{id}":              s.getRollout,
		"GET /v1/rollouts/{id}/events":       s.rolloutEvents,
		"GET /v1/rollouts/{id}/forecast":     s.getForecast,
		"GET /v1/events":                     s.fleetEvents,
		"GET /v1/releases":                   s.listReleases,
		"POST /v1/rollouts/{id}/{action}":    s.act,
		"GET /v1/hosts":                      s.listHosts,
		"GET /v1/hosts/{name}":               s.getHost,
		"GET /v1/status":                     s.status,
		"POST /v1/web/logins":                s.webLogins,
		"GET /v1/intents":                    s.listIntents,
		"POST /v1/analysis/trials":           s.analysisTrial,
	}
	for pattern, h := range api {
		s.mux.Handle(pattern, s.wrap(pattern, h, authenticated))
	}
	s.mux.Handle("POST /v1/hooks/git", s.wrap("POST /v1/hooks/git", s.webhook, anonymous))
	s.mux.Handle("GET /healthz", s.wrap("GET /healthz", s.healthz, probe))
	s.mux.Handle("GET /readyz", s.wrap("GET /readyz", s.readyz, probe))
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{})) // a probe: not limited
	s.mux.Handle("/", s.wrap("other", s.notFound, anonymous))
	dash := dashboard.New(dashboard.Config{Engine: dashboardEngine{s}, Store: s.st, Clock: s.cfg.Clock, Log: s.log,
		InsecureDev: s.cfg.InsecureDev, Stopping: s.stopping})
	dash.Routes(func(pattern string, h http.Handler) { s.mux.Handle(pattern, s.counted(pattern, h)) })
}

// counted counts a handler's answers by route and status.
func (s *Server) counted(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		s.m.httpRequests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
	})
}

// access is how wrap lets a request in.
type access int

const (
	// authenticated: the client's key must be a host's or an operator's
	// (rfcs/0007 §Authentication); rate limited.
	authenticated access = iota
	// anonymous: no authentication; rate limited, by the client's key when
	// it presents a known one, else by its address.
	anonymous
	// probe: no authentication and no rate limit, so that a flood never
	// makes a load balancer or Prometheus see a replica as down. Probes
	// read no body and at most one row.
	probe
)

// wrap rate-limits and authenticates (as acc says), runs the handler,
// writes its error and counts the request. The client is identified once,
// for both: an identified client is limited by its own bucket, anyone else
// by its address's, so a known host can only drain its own.
func (s *Server) wrap(route string, h handler, acc access) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		var c client
		var e *codes.Error
		if acc != probe {
			c, e = s.ids.identify(r, s.cfg.InsecureDev)
			if le := s.limits.admit(rec, r, c); le != nil {
				e = le
			} else if acc == anonymous {
				c, e = client{}, nil
			}
		}
		if e == nil {
			e = h(rec, r, c)
		}
		if e == errParked {
			return // counted when answered (park.go)
		}
		if e != nil {
			writeError(rec, e)
		}
		s.m.httpRequests.WithLabelValues(route, fmt.Sprint(rec.status)).Inc()
	})
}

// countHandshake counts a TLS handshake, full or resumed, as crypto/tls
// checks the connection (a full one before the client's signature is
// read); it refuses none: the identity is checked per request.
func (s *Server) countHandshake(cs tls.ConnectionState) error {
	if cs.DidResume {
		s.m.handshakes[1].Inc()
	} else {
		s.m.handshakes[0].Inc()
	}
	return nil
}

// browsersRefuse reports whether browsers refuse a server certificate for
// its key: Ed25519, which agents and the CLI accept but no browser does
// (Chromium: ERR_SSL_VERSION_OR_CIPHER_MISMATCH).
func browsersRefuse(cert tls.Certificate) bool {
	_, ed := cert.PrivateKey.(ed25519.PrivateKey)
	return ed
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (a parked
// long-poll hijacks it).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush passes streaming responses through.
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// notFound answers paths and methods the API does not have, in JSON.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request, _ client) *codes.Error {
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			return codes.Errorf(codes.MethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path)
		}
	}
	return codes.Errorf(codes.NotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
}

// webhook is POST /v1/hooks/git: a forge tells us a ref moved. The body's
// HMAC-SHA256 with the shared secret must be in X-Nixfleet-Signature or
// X-Hub-Signature-256, as "sha256=<hex>".
func (s *Server) webhook(w http.ResponseWriter, r *http.Request, _ client) *codes.Error {
	if s.cfg.WebhookSecret == "" {
		return codes.Errorf(codes.WebhookDisabled, "the git webhook is not configured")
	}
	body, e := readBody(w, r, maxHookBody)
	if e != nil {
		return e
	}
	got := r.Header.Get(SignatureHeader)
	if got == "" {
		got = r.Header.Get("X-Hub-Signature-256")
	}
	mac := hmac.New(sha256.New, []byte(s.cfg.WebhookSecret))
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(strings.TrimSpace(got)), []byte(want)) {
		// The one code answered with two statuses: a report's bad
		// signature is 403 (the registry's), a webhook's is 401.
		e := codes.Errorf(codes.BadSignature, "the webhook signature does not match the shared secret")
		e.HTTP = http.StatusUnauthorized
		return e
	}
	s.src.kick()
	writeJSON(w, http.StatusAccepted, map[string]bool{"polling": true})
	return nil
}

// healthz says the process is up, and loudly when it runs insecure.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ client) *codes.Error {
	_, leader := s.ticker.isLeader()
	body := map[string]any{"status": "ok", "replica": s.replica, "leader": leader, "insecureDev": s.cfg.InsecureDev}
	if s.cfg.InsecureDev {
		body["warning"] = "INSECURE DEV MODE: no TLS, no authentication"
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// readyz says the replica can serve: the store answers and git was polled.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ client) *codes.Error {
	if _, err := s.st.Watermark(r.Context()); err != nil {
		return codes.Errorf(codes.Unavailable, "the store does not answer: %v", err)
	}
	if polled, _ := s.src.status(); !polled {
		return codes.Errorf(codes.Unavailable, "the fleet repository has not been read yet")
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}
