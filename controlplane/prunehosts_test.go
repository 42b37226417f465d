package controlplane_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
)

// TestDecommissionedHostsAreForgotten: a host removed from the signed
// fleet is refused at once, and once unheard for the retention period the
// control plane forgets it: its status and last-seen time leave the store
// (GET /v1/hosts/{name} is 404, host lists do not name it); the hosts of
// the fleet, heard from as long ago, are kept.
func TestDecommissionedHostsAreForgotten(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), func(c *controlplane.Config) { c.EventRetention = 24 * time.Hour })
			hosts := e.hosts()
			e.onboard(hosts)
			ctx := context.Background()
			viewer := e.client(e.viewKey.priv, "victor")
			retired := e.spec.Hosts[3]
			if retired.Name != "web-3" {
				t.Fatalf("spec host 3 is %s", retired.Name)
			}
			e.spec.Hosts = e.spec.Hosts[:3]
			e.release("v1", 2)
			e.await(10*time.Second, "web-3 is refused", func() bool {
				v0 := fleetrepo.Closure("web-3", "v0")
				_, err := e.client(retired.Key, "web-3").Checkin(ctx, proto.CheckinRequest{Hostname: "web-3", Current: v0, Booted: v0,
					Probes: proto.ProbeSummary{Total: 1, Failed: []string{}}, FailedUnits: []string{}})
				var ae *apiclient.Error
				return errors.As(err, &ae) && ae.Code == string(codes.UnknownClient)
			})
			// web-3 is refused once the fleet is verified; it stays in the
			// channel's latest rollout (and GET /v1/hosts/web-3 shows it
			// there) until the tick opens the release's rollout, which the
			// day's jump below must not overtake: the leader's lease would
			// expire first.
			e.await(10*time.Second, "the release's rollout opens", func() bool {
				var r proto.Rollout
				return viewer.Get(ctx, "/v1/rollouts/"+rolloutID("stable", 2), &r) == nil
			})

			// Within the retention period nothing is forgotten.
			e.srv.PruneHostsNow(ctx)
			var h proto.HostView
			if err := viewer.Get(ctx, "/v1/hosts/web-3", &h); err != nil {
				t.Fatalf("web-3 within the retention period: %v", err)
			}
			// A day later, nobody heard from since: web-3 is forgotten, the
			// others kept.
			e.clock.Advance(25 * time.Hour)
			e.srv.PruneHostsNow(ctx)
			err := viewer.Get(ctx, "/v1/hosts/web-3", &h)
			var ae *apiclient.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
				t.Fatalf("web-3 after the retention period: %v, want 404", err)
			}
			list, _, err := viewer.Hosts(ctx, proto.HostQuery{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, h := range list {
				names = append(names, h.Hostname)
			}
			if want := []string{"canary", "web-1", "web-2"}; !slices.Equal(names, want) {
				t.Errorf("hosts after web-3 was forgotten: %v, want %v", names, want)
			}
			e.logMu.Lock()
			logged := strings.Contains(e.log.String(), "forgot hosts that left the fleet")
			e.logMu.Unlock()
			if !logged {
				t.Error("forgetting web-3 was not logged")
			}
		})
	}
}
