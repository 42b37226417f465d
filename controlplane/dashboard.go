package controlplane

import (
	"context"
	"net/http"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/dashboard"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Dashboard sign-in links (rfcs/0011 §Sign-in): how long one lasts unless
// the CLI asks for another lifetime, at most webLoginMaxTTL.
const (
	webLoginTTL    = 2 * time.Minute
	webLoginMaxTTL = time.Hour
)

// webLogins is POST /v1/web/logins: an operator (any role) asks for a
// one-time sign-in link for the dashboard.
func (s *Server) webLogins(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
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
			return codes.Errorf(codes.BadRequest, "validSeconds must be between 1 and %d", int(webLoginMaxTTL.Seconds()))
		}
	}
	now := s.cfg.Clock.Now()
	if c.dev {
		writeJSON(w, http.StatusOK, proto.WebLogin{Path: "/ui/", Operator: c.actor(), Role: RoleApprover, Expires: now.Add(ttl).UTC()})
		return nil
	}
	token := dashboard.NewSecret()
	l := store.WebLogin{TokenHash: dashboard.HashHex(token), Operator: c.operator.Name, KeyHash: s.ids.operatorKeyHash(c.operator.Name),
		Expires: now.Add(ttl), SessionTTL: s.cfg.WebSessionTTL}
	if err := s.st.AddWebLogin(r.Context(), l); err != nil {
		return s.internal("recording a dashboard login", err)
	}
	s.log.Info("dashboard login link issued", "operator", c.operator.Name, "expires", l.Expires)
	writeJSON(w, http.StatusOK, proto.WebLogin{Path: dashboard.LoginPath(token), Operator: c.operator.Name,
		Role: c.operator.Role, Expires: l.Expires.UTC()})
	return nil
}

// dashboardEngine is what the dashboard (package dashboard) sees of the
// server: the operator API's views and intents, the operators file and
// the hub. Each method answers as the API's own handler would.
type dashboardEngine struct{ s *Server }

var _ dashboard.Engine = dashboardEngine{}

// coded is a handler's error as an error: nil stays an untyped nil.
func coded(e *codes.Error) error {
	if e == nil {
		return nil
	}
	return e
}

func (d dashboardEngine) Admit(w http.ResponseWriter, r *http.Request) error {
	return coded(d.s.limits.admit(w, r, client{}))
}

func (d dashboardEngine) Operator(name, keyHash string) (dashboard.User, bool) {
	op, ok := d.s.ids.operatorByName(name, keyHash)
	return dashboard.User{Name: op.Name, Role: op.Role, Acts: roleActs(op.Role), Approves: roleApproves(op.Role)}, ok
}

func (d dashboardEngine) MayFile(u dashboard.User, kind string) error {
	return coded(mayFile(u.Name, u.Role, u.Dev, kind))
}

func (d dashboardEngine) Status(r *http.Request) (proto.Status, map[string]reconciler.Rollout, error) {
	st, full, e := d.s.statusView(r)
	return st, full, coded(e)
}

func (d dashboardEngine) Rollout(r *http.Request) (reconciler.Rollout, proto.Rollout, bool, error) {
	ro, e := d.s.rollout(r)
	if e != nil {
		return ro, proto.Rollout{}, false, e
	}
	sum, latest, e := d.s.rolloutView(r, ro)
	return ro, sum, latest, coded(e)
}

func (d dashboardEngine) Host(r *http.Request, name string, now time.Time) (proto.HostView, error) {
	rec, e := d.s.hostRecord(r, name)
	if e != nil {
		return proto.HostView{}, e
	}
	hd, e := d.s.heads(r, rec)
	if e != nil {
		return proto.HostView{}, e
	}
	return d.s.hostView(rec, hd, now), nil
}

func (d dashboardEngine) Intent(ctx context.Context, id string) (proto.IntentResponse, string, error) {
	rec, err := d.s.st.Intent(ctx, id)
	if err != nil {
		return proto.IntentResponse{}, "", err
	}
	return proto.IntentResponse{Intent: proto.Intent(rec.Intent), Result: wireIntentResult(rec.Result)}, rec.Intent.RolloutID, nil
}

func (d dashboardEngine) IntentKind(kind string) error { return coded(checkIntentKind(kind)) }

func (d dashboardEngine) File(r *http.Request, f dashboard.Filing) (string, string, bool, error) {
	if e := checkIntentBody(f.Kind, f.Wave, f.Comment); e != nil {
		return "", "", false, e
	}
	ro, e := d.s.rolloutHead(r)
	if e != nil {
		return "", "", false, e
	}
	sent, ans, e := d.s.fileIntent(r, ro, filing{kind: f.Kind, actor: f.Actor, comment: f.Comment, wave: f.Wave})
	return ro.ID, ans.resp.Intent.ID, sent, coded(e)
}

func (d dashboardEngine) Occupancy(budgets []proto.RolloutBudget) []proto.BudgetUse {
	return d.s.hub.occupancy(budgets)
}

// Covers looks a budget's hosts up in the hub until one is the channel's:
// a budget of the channel stops at its first such host.
func (d dashboardEngine) Covers(channel string, budgets []proto.RolloutBudget) []bool {
	out := make([]bool, len(budgets))
	for i, b := range budgets {
		for _, host := range b.Hosts {
			if a, ok := d.s.hub.get(host); ok && a.Channel == channel {
				out[i] = true
				break
			}
		}
	}
	return out
}

func (d dashboardEngine) FollowSignal() <-chan struct{} { return d.s.hub.followSignal() }

func (d dashboardEngine) EventMark() int64 { return d.s.hub.eventMark() }
