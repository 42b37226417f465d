package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/proto"
)

// TestExplainPrefetched: host explain prints a prefetched line when the
// host holds a closure fetched ahead of its dispatch, says whether it is
// its target, and carries it in --json; a host holding none prints no
// such line and no such member.
func TestExplainPrefetched(t *testing.T) {
	t.Parallel()
	host := func(prefetched string) proto.HostView {
		return proto.HostView{Hostname: "web-1", Seen: true, Online: true, Rollout: "stable@c2", Channel: "stable", RolloutState: "Active",
			Observed: proto.ObservedHost{Current: "v0", Prefetched: prefetched},
			Host:     &proto.RolloutHost{Hostname: "web-1", Wave: 1, Target: "v1", State: "Pending"},
			Explain:  proto.Situation{Code: "wave_not_active", Message: "waits for wave 1 to start; its target is prefetched", Moves: true}}
	}
	for _, tc := range []struct {
		name, prefetched, line string
	}{
		{"its target", "v1", "prefetched v1 (its target: the dispatch only switches)"},
		{"an older closure", "v0b", "prefetched v0b (not its target)"},
		{"none", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := explainOf(host(tc.prefetched))
			var b bytes.Buffer
			printExplain(&b, style{}, e)
			got := ""
			for line := range strings.Lines(b.String()) {
				if strings.HasPrefix(strings.TrimSpace(line), "prefetched ") {
					got = strings.Join(strings.Fields(line), " ")
				}
			}
			if got != tc.line {
				t.Errorf("the prefetched line is %q, want %q in:\n%s", got, tc.line, b.String())
			}
			j, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if has := strings.Contains(string(j), `"prefetched":`); has != (tc.prefetched != "") {
				t.Errorf("--json %s", j)
			}
		})
	}
}
