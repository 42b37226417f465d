package nix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// What the signing step of the cross-checks stamps.
const testCommit = "0123456789abcdef0123456789abcdef01234567"

var testNow = time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)

// caseExpect is the `expect` member of nix/tests/case.nix.
type caseExpect struct {
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
}

// TestEveryNixFileParses: nix-instantiate --parse accepts every .nix file
// of the repository.
func TestEveryNixFileParses(t *testing.T) {
	t.Parallel()
	requireNix(t)
	var files []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repoRoot && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".nix") {
			rel, err := filepath.Rel(repoRoot, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"flake.nix", "nix/lib/default.nix", "nix/lib/mkfleet.nix", "nix/modules/agent.nix", "nix/modules/control-plane.nix"} {
		if !slices.Contains(files, want) {
			t.Errorf("%s is missing", want)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			if r := runNix(t, "nix-instantiate", "--parse", f); r.err != nil {
				t.Errorf("nix-instantiate --parse %s: %v\n%s", f, r.err, r.stderr)
			}
		})
	}
}

// TestMkFleetFleets: each fleet of testdata/nix/fleets and nix/tests/fleets
// (caseRoots) evaluates, with
// nix-instantiate and with nix eval, to its golden fleet.resolved.json and
// traces exactly the expected warnings; the Go side decodes it strictly,
// resolves the policies' selectors to the same waves, and, with a closure
// for every host that has a configuration (as CI fills them), validates it
// with the same warnings, signs it and projects one manifest per channel
// that places every built host in the wave mkFleet put it in; its output
// and the signed artifacts validate against schema/'s JSON Schemas.
func TestMkFleetFleets(t *testing.T) {
	t.Parallel()
	requireNix(t)
	key := newKey(t)
	for _, file := range caseFiles(t, "fleets") {
		t.Run(caseName(file), func(t *testing.T) {
			t.Parallel()
			r := evalCase(t, file, "resolved")
			if r.err != nil {
				t.Fatalf("mkFleet refused the fleet: %v\n%s", r.err, r.stderr)
			}
			raw := bytes.TrimSpace(r.stdout)
			var expect caseExpect
			mustEvalCase(t, file, "expect", &expect)
			var built []string
			mustEvalCase(t, file, "built", &built)

			if diff := cmp.Diff(expect.Warnings, traced(r.stderr), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("traced warnings (-want +got):\n%s", diff)
			}
			ev := bytes.TrimSpace(mustNix(t, "nix", "eval", "--json", "-f", "nix/tests/case.nix", "--arg", "file", "./"+file, "resolved"))
			if !bytes.Equal(ev, raw) {
				t.Errorf("nix eval and nix-instantiate disagree:\n%s\n%s", ev, raw)
			}
			checkGolden(t, strings.TrimSuffix(file, ".nix")+".resolved.json", raw)
			checkSchema(t, "fleet.resolved.schema.json", raw)

			f, err := proto.DecodeFleetResolved(raw)
			if err != nil {
				t.Fatalf("the Go decoder refuses mkFleet's output: %v", err)
			}
			checkWavesAgree(t, f)

			b, err := release.Sign(withClosures(t, raw, fakeClosures(built)), release.Options{Signer: key, Commit: testCommit, Now: testNow})
			if err != nil {
				t.Fatalf("release.Sign refuses mkFleet's output: %v", err)
			}
			if diff := cmp.Diff(expect.Warnings, goWarningsAsNix(b.Warnings), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Go warnings (-Nix's +Go's):\n%s", diff)
			}
			checkManifests(t, f, built, b)
			checkSchema(t, "fleet.resolved.schema.json", b.Fleet.Body)
			for _, m := range b.Rollouts {
				checkSchema(t, "rollout-manifest.schema.json", m.Body)
			}
		})
	}
}

// TestMkFleetInvalid: each fleet of testdata/nix/invalid and
// nix/tests/invalid (caseRoots) fails evaluation
// with one error that lists every expected problem, with nix-instantiate
// and with nix eval; mkFleet's `errors` and `warnings` are exactly the
// expected ones, in order; and when the input itself is well-formed,
// manifest.ValidateFleet reports the same problems and warnings for the
// same document (`unchecked`, with the closures CI would fill).
func TestMkFleetInvalid(t *testing.T) {
	t.Parallel()
	requireNix(t)
	for _, file := range caseFiles(t, "invalid") {
		t.Run(caseName(file), func(t *testing.T) {
			t.Parallel()
			var expect caseExpect
			mustEvalCase(t, file, "expect", &expect)
			if len(expect.Errors) == 0 {
				t.Fatal("the case lists no expected error")
			}
			var got caseExpect
			mustEvalCase(t, file, "errors", &got.Errors)
			mustEvalCase(t, file, "warnings", &got.Warnings)
			if diff := cmp.Diff(expect, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}

			header := fmt.Sprintf("nixfleet: mkFleet: the fleet has %d problem(s):", len(expect.Errors))
			for _, run := range []nixRun{
				evalCase(t, file, "resolved"),
				runNix(t, "nix", "eval", "--json", "-f", "nix/tests/case.nix", "--arg", "file", "./"+file, "resolved"),
			} {
				if run.err == nil {
					t.Fatalf("evaluation succeeded; it must fail:\n%s", run.stdout)
				}
				msg := string(run.stderr)
				if !strings.Contains(msg, header) {
					t.Errorf("the error does not start with %q:\n%s", header, msg)
				}
				for _, e := range expect.Errors {
					if !strings.Contains(msg, "- "+e+"\n") {
						t.Errorf("the error does not list %q:\n%s", e, msg)
					}
				}
			}

			var inputErrors []string
			mustEvalCase(t, file, "inputErrors", &inputErrors)
			if len(inputErrors) > 0 {
				// Problems of mkFleet's input (types, unknown attributes,
				// selector references) have no counterpart in a document.
				return
			}
			var built []string
			mustEvalCase(t, file, "built", &built)
			doc := withClosures(t, mustEvalCase(t, file, "unchecked", nil), fakeClosures(built))
			f, err := proto.DecodeFleetResolved(doc)
			if err != nil {
				t.Fatalf("the Go decoder refuses the document: %v", err)
			}
			warns, err := manifest.ValidateFleet(f)
			var ve *manifest.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("manifest.ValidateFleet: %v, want a *ValidationError", err)
			}
			if diff := cmp.Diff(comparableProblems(got.Errors), comparableProblems(ve.Problems)); diff != "" {
				t.Errorf("problems (-Nix's +Go's):\n%s", diff)
			}
			if diff := cmp.Diff(got.Warnings, goWarningsAsNix(warns), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("warnings (-Nix's +Go's):\n%s", diff)
			}
		})
	}
}

// TestMkFleetReproducesSampleFleet: testdata/nix/fleets/two-channels.nix
// declares testdata/fleets/two-channels.json. With the same closures, the
// two documents are equal but for the waves (resolved per channel by
// mkFleet, fleet-wide in the sample), and signing them gives the same
// rollout manifests.
func TestMkFleetReproducesSampleFleet(t *testing.T) {
	t.Parallel()
	requireNix(t)
	sample, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "fleets", "two-channels.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.DecodeFleetResolved(sample)
	if err != nil {
		t.Fatal(err)
	}
	closures := map[string]string{}
	for name, h := range want.Hosts {
		closures[name] = *h.ClosureHash
	}
	nixDoc := withClosures(t, mustEvalCase(t, "testdata/nix/fleets/two-channels.nix", "resolved", nil), closures)
	got, err := proto.DecodeFleetResolved(nixDoc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(proto.FleetResolved{}, "Waves"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("fleet (-sample +mkFleet):\n%s", diff)
	}

	key := newKey(t)
	manifests := func(doc []byte) map[string]*proto.RolloutManifest {
		b, err := release.Sign(doc, release.Options{Signer: key, Commit: testCommit, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*proto.RolloutManifest{}
		for _, a := range b.Rollouts {
			m, err := proto.DecodeRolloutManifest(a.Body)
			if err != nil {
				t.Fatal(err)
			}
			m.FleetResolvedHash = "" // the documents differ in their waves
			out[a.Path] = m
		}
		return out
	}
	if diff := cmp.Diff(manifests(sample), manifests(nixDoc)); diff != "" {
		t.Errorf("rollout manifests (-sample +mkFleet):\n%s", diff)
	}
}

// TestMkFleetHealthGateRoundTrip: the health-gate minimums and canary
// analyses declared in testdata/nix/fleets/promotion.nix reach
// fleet.resolved as mkFleet writes it (the JSON members, not only the Go
// fields: an analysis's defaults filled in, an analysis's Prometheus
// source, an empty failureCondition or source and an empty list of
// analyses left out) and, through signing and
// projection, the healthGate of each channel's manifest.
func TestMkFleetHealthGateRoundTrip(t *testing.T) {
	t.Parallel()
	requireNix(t)
	const file = "testdata/nix/fleets/promotion.nix"
	raw := bytes.TrimSpace(mustEvalCase(t, file, "resolved", nil))

	var doc struct {
		RolloutPolicies map[string]struct {
			HealthGate map[string]json.RawMessage `json:"healthGate"`
		} `json:"rolloutPolicies"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	members := func(policy string) map[string]string {
		out := map[string]string{}
		for k, v := range doc.RolloutPolicies[policy].HealthGate {
			out[k] = string(v)
		}
		return out
	}
	wantMembers := map[string]map[string]string{
		"gated": {
			"maxFailures":        "1",
			"minConverged":       "2",
			"minConvergedPct":    "50",
			"systemdFailedUnits": `{"max":0}`,
			"analysis": `[` +
				`{"count":1,"failureLimit":0,"inconclusiveLimit":0,"interval":"1m","name":"error-rate",` +
				`"query":"sum(rate(http_requests_total{code=~\"5..\",host=~\"{{ .HostsRegex }}\"}[2m])) / sum(rate(http_requests_total{host=~\"{{ .HostsRegex }}\"}[2m]))",` +
				`"successCondition":"result < 0.01"},` +
				`{"count":5,"failureCondition":"result > 1","failureLimit":1,"inconclusiveLimit":2,"interval":"30s","name":"latency",` +
				`"query":"histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{host=~\"{{.HostsRegex}}\",wave=\"{{ .Wave }}\"}[5m])))",` +
				`"source":"team-a","successCondition":"result <= 0.25"},` +
				`{"count":3,"failureLimit":0,"inconclusiveLimit":0,"interval":"1m","name":"up",` +
				`"query":"min(up{job=\"nixfleet-agent\",host=~\"{{ .HostsRegex }}\"})",` +
				`"successCondition":"result == 1"}` +
				`]`,
		},
		"everyone": {"minConvergedPct": "100"},
	}
	for policy, want := range wantMembers {
		if diff := cmp.Diff(want, members(policy)); diff != "" {
			t.Errorf("fleet.resolved rolloutPolicies.%s.healthGate (-want +mkFleet's):\n%s", policy, diff)
		}
	}

	var built []string
	mustEvalCase(t, file, "built", &built)
	b, err := release.Sign(withClosures(t, raw, fakeClosures(built)), release.Options{Signer: newKey(t), Commit: testCommit, Now: testNow})
	if err != nil {
		t.Fatalf("release.Sign: %v", err)
	}
	one, two, fifty, hundred := 1, 2, 50, 100
	analyses := []proto.Analysis{
		{
			Name:             "error-rate",
			Query:            `sum(rate(http_requests_total{code=~"5..",host=~"{{ .HostsRegex }}"}[2m])) / sum(rate(http_requests_total{host=~"{{ .HostsRegex }}"}[2m]))`,
			SuccessCondition: "result < 0.01",
			Interval:         "1m",
			Count:            1,
		},
		{
			Name:              "latency",
			Query:             `histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{host=~"{{.HostsRegex}}",wave="{{ .Wave }}"}[5m])))`,
			SuccessCondition:  "result <= 0.25",
			FailureCondition:  "result > 1",
			Interval:          "30s",
			Count:             5,
			FailureLimit:      1,
			InconclusiveLimit: 2,
			Source:            "team-a",
		},
		{
			Name:             "up",
			Query:            `min(up{job="nixfleet-agent",host=~"{{ .HostsRegex }}"})`,
			SuccessCondition: "result == 1",
			Interval:         "1m",
			Count:            3,
		},
	}
	wantGates := map[string]proto.HealthGate{
		"stable": {MaxFailures: &one, MinConverged: &two, MinConvergedPct: &fifty, SystemdFailedUnits: &proto.SystemdFailedUnits{Max: 0}, Analysis: analyses},
		"lab":    {MinConvergedPct: &hundred},
	}
	got := map[string]proto.HealthGate{}
	for _, a := range b.Rollouts {
		m, err := proto.DecodeRolloutManifest(a.Body)
		if err != nil {
			t.Fatalf("%s: %v", a.Path, err)
		}
		got[m.Channel] = m.HealthGate
	}
	if diff := cmp.Diff(wantGates, got); diff != "" {
		t.Errorf("manifest healthGate by channel (-want +got):\n%s", diff)
	}
}

// TestMkFleetChangeControl: the maintenance windows, approval gates and
// freezes declared in nix/tests/fleets/change-control.nix reach
// fleet.resolved as the Go side decodes them: the policy's windows, its
// host selectors' (a combinator written out as the hosts it matches), each
// wave's windows and approval gate copied to the channel's resolved wave,
// and the freezes with their offsets; empty lists are left out, like
// absent ones, and so are approvers not given. manifest.ValidateFleet
// accepts the document without a warning.
func TestMkFleetChangeControl(t *testing.T) {
	t.Parallel()
	requireNix(t)
	const file = "nix/tests/fleets/change-control.nix"
	raw := bytes.TrimSpace(mustEvalCase(t, file, "resolved", nil))
	var built []string
	mustEvalCase(t, file, "built", &built)
	f, err := proto.DecodeFleetResolved(withClosures(t, raw, fakeClosures(built)))
	if err != nil {
		t.Fatal(err)
	}

	weekends := proto.Window{Days: []string{"sat", "sun"}, Start: "22:00", DurationMinutes: 240, TimeZone: "Europe/Berlin"}
	officeHours := proto.Window{Days: []string{"mon", "tue", "wed", "thu", "fri"}, Start: "09:00", DurationMinutes: 480, TimeZone: "Europe/Berlin"}
	twoApprovers := &proto.Approval{Required: true, Approvers: 2}
	oneApprover := &proto.Approval{Required: true}
	wantPolicies := map[string]proto.RolloutPolicy{
		"windowed": {
			Strategy: "staged",
			Waves: []proto.PolicyWave{
				{Name: "canary", Selector: proto.Selector{Tags: []string{"canary"}}, SoakMinutes: 30, Windows: []proto.Window{officeHours}, Approval: twoApprovers},
				{Selector: proto.Selector{All: true}, SoakMinutes: 60, Approval: oneApprover},
			},
			OnHealthFailure: "halt",
			Windows:         []proto.Window{weekends},
			HostWindows: []proto.HostWindows{
				{
					Selector: proto.Selector{Tags: []string{"db"}},
					Windows:  []proto.Window{{Days: []string{"sun"}, Start: "03:00", DurationMinutes: 120, TimeZone: "UTC"}},
				},
				{
					Selector: proto.Selector{Hosts: []string{"web-02", "web-03"}},
					Windows: []proto.Window{
						{Days: []string{"tue", "thu"}, Start: "23:30", DurationMinutes: 90, TimeZone: "America/Argentina/Buenos_Aires"},
						{Days: []string{"sat"}, Start: "00:00", DurationMinutes: 10080, TimeZone: "Etc/GMT+5"},
					},
				},
			},
		},
		"anytime": {Strategy: "all-at-once", OnHealthFailure: "halt"},
	}
	if diff := cmp.Diff(wantPolicies, f.RolloutPolicies, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("rolloutPolicies (-want +mkFleet's):\n%s", diff)
	}
	wantWaves := map[string][]proto.Wave{
		"prod": {
			{Hosts: []string{"web-01"}, Name: "canary", SoakMinutes: 30, Windows: []proto.Window{officeHours}, Approval: twoApprovers},
			{Hosts: []string{"db-01", "web-02", "web-03"}, SoakMinutes: 60, Approval: oneApprover},
		},
		"lab": {},
	}
	if diff := cmp.Diff(wantWaves, f.Waves, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("waves (-want +mkFleet's):\n%s", diff)
	}
	cet := time.FixedZone("", 60*60)
	wantFreezes := []proto.Freeze{
		{From: time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC), Until: time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC), Reason: "holiday freeze", Channels: []string{"prod"}},
		{From: time.Date(2026, 11, 26, 18, 0, 0, 0, cet), Until: time.Date(2026, 11, 27, 6, 0, 0, 0, cet), Reason: "datacenter move"},
	}
	if diff := cmp.Diff(wantFreezes, f.Freezes, cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("freezes (-want +mkFleet's):\n%s", diff)
	}

	// The members as mkFleet writes them: empty lists are left out, not
	// written empty, and so are approvers not given.
	var doc struct {
		RolloutPolicies map[string]map[string]json.RawMessage   `json:"rolloutPolicies"`
		Waves           map[string][]map[string]json.RawMessage `json:"waves"`
		Freezes         []map[string]json.RawMessage            `json:"freezes"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"windows", "hostWindows"} {
		if v, ok := doc.RolloutPolicies["anytime"][m]; ok {
			t.Errorf("rolloutPolicies.anytime.%s is %s; an empty list must be left out", m, v)
		}
	}
	if v, ok := doc.Waves["prod"][1]["windows"]; ok {
		t.Errorf("waves.prod[1].windows is %s; an empty list must be left out", v)
	}
	if v, ok := doc.Freezes[1]["channels"]; ok {
		t.Errorf("freezes[1].channels is %s; an empty list must be left out", v)
	}
	var policy struct {
		Waves []map[string]json.RawMessage `json:"waves"`
	}
	if err := json.Unmarshal(doc.RolloutPolicies["windowed"]["waves"], &policy.Waves); err != nil {
		t.Fatal(err)
	}
	for where, w := range map[string]map[string]json.RawMessage{
		"rolloutPolicies.windowed.waves[0]": policy.Waves[0],
		"rolloutPolicies.windowed.waves[1]": policy.Waves[1],
		"waves.prod[0]":                     doc.Waves["prod"][0],
		"waves.prod[1]":                     doc.Waves["prod"][1],
	} {
		want := `{"approvers":2,"required":true}`
		if strings.HasSuffix(where, "[1]") {
			want = `{"required":true}`
		}
		if got := string(w["approval"]); got != want {
			t.Errorf("%s.approval is %s, want %s", where, got, want)
		}
	}

	warns, err := manifest.ValidateFleet(f)
	if err != nil {
		t.Errorf("manifest.ValidateFleet: %v", err)
	}
	if len(warns) > 0 {
		t.Errorf("manifest.ValidateFleet warns: %q", warns)
	}
}

// TestMkFleetReboots: the reboot steps, waves' reboot settings and boot
// loaders declared in nix/tests/fleets/reboots.nix reach fleet.resolved as
// the Go side decodes them: a loader read from a configuration's
// boot.loader (systemd-boot before grub, neither: none) or given by the
// host, which wins, and none where neither says; kexec = false and a
// wave's null reboot left out; and each wave's reboot as
// proto.RolloutPolicy.RebootAllowed reads it.
func TestMkFleetReboots(t *testing.T) {
	t.Parallel()
	requireNix(t)
	const file = "nix/tests/fleets/reboots.nix"
	raw := bytes.TrimSpace(mustEvalCase(t, file, "resolved", nil))
	f, err := proto.DecodeFleetResolved(raw)
	if err != nil {
		t.Fatal(err)
	}
	wantLoaders := map[string]string{
		"web-01": proto.BootLoaderSystemdBoot, "web-02": proto.BootLoaderGrub, "db-01": proto.BootLoaderSystemdBoot, "db-02": "",
		"lab-01": proto.BootLoaderGrub, "lab-02": proto.BootLoaderGrub, "ct-01": proto.BootLoaderNone, "ct-02": proto.BootLoaderNone,
	}
	gotLoaders := map[string]string{}
	for name, h := range f.Hosts {
		gotLoaders[name] = h.BootLoader
	}
	if diff := cmp.Diff(wantLoaders, gotLoaders); diff != "" {
		t.Errorf("bootLoader by host (-want +mkFleet's):\n%s", diff)
	}
	no, yes := false, true
	wantReboots := map[string]*proto.Reboot{
		"rebooting":   {Allowed: true, BootTimeoutMinutes: 20, Kexec: true},
		"second-wave": {BootTimeoutMinutes: 1440},
		"never":       nil,
	}
	wantWaves := map[string][]*bool{"rebooting": {&no, nil}, "second-wave": {nil, &yes}, "never": nil}
	wantAllowed := map[string][]bool{"rebooting": {false, true}, "second-wave": {false, true}, "never": {false}}
	for name, p := range f.RolloutPolicies {
		if diff := cmp.Diff(wantReboots[name], p.Reboot); diff != "" {
			t.Errorf("rolloutPolicies.%s.reboot (-want +mkFleet's):\n%s", name, diff)
		}
		var waves []*bool
		var allowed []bool
		for i, w := range p.Waves {
			waves = append(waves, w.Reboot)
			allowed = append(allowed, p.RebootAllowed(i))
		}
		if len(p.Waves) == 0 {
			allowed = append(allowed, p.RebootAllowed(0))
		}
		if diff := cmp.Diff(wantWaves[name], waves); diff != "" {
			t.Errorf("rolloutPolicies.%s.waves[].reboot (-want +mkFleet's):\n%s", name, diff)
		}
		if diff := cmp.Diff(wantAllowed[name], allowed); diff != "" {
			t.Errorf("rolloutPolicies.%s: RebootAllowed by wave (-want +got):\n%s", name, diff)
		}
	}
	var doc struct {
		RolloutPolicies map[string]struct {
			Reboot map[string]json.RawMessage   `json:"reboot"`
			Waves  []map[string]json.RawMessage `json:"waves"`
		} `json:"rolloutPolicies"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if v, ok := doc.RolloutPolicies["second-wave"].Reboot["kexec"]; ok {
		t.Errorf("rolloutPolicies.second-wave.reboot.kexec is %s; false must be left out", v)
	}
	if v, ok := doc.RolloutPolicies["rebooting"].Waves[1]["reboot"]; ok {
		t.Errorf("rolloutPolicies.rebooting.waves[1].reboot is %s; null must be left out", v)
	}
}

// TestNixRunner: nix/tests (what the flake's mkfleet check runs) passes
// every case with Nix alone.
func TestNixRunner(t *testing.T) {
	t.Parallel()
	requireNix(t)
	out := mustNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests", "-A", "failures")
	var failures []string
	if err := json.Unmarshal(out, &failures); err != nil {
		t.Fatal(err)
	}
	for _, f := range failures {
		t.Error(f)
	}
	var count int
	if err := json.Unmarshal(mustNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests", "-A", "count"), &count); err != nil {
		t.Fatal(err)
	}
	if want := len(caseFiles(t, "fleets")) + len(caseFiles(t, "invalid")); count != want {
		t.Errorf("nix/tests ran %d cases, want %d", count, want)
	}
}

func newKey(t testing.TB) *trust.PrivateKey {
	t.Helper()
	k, err := trust.GenerateKey(proto.AlgorithmEd25519)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// traced returns the nixfleet warnings Nix traced on stderr.
func traced(stderr []byte) []string {
	var out []string
	for line := range strings.Lines(string(stderr)) {
		if w, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "trace: nixfleet: warning: "); ok {
			out = append(out, w)
		}
	}
	return out
}

// noClosureRE is the Go warning for a host without a closure; at
// evaluation time mkFleet says why it will have none.
var noClosureRE = regexp.MustCompile(`^host ("(?:[^"\\]|\\.)*") has no closureHash; it is not part of any rollout$`)

func goWarningsAsNix(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = noClosureRE.ReplaceAllString(w, `host $1 has no configuration, so CI builds no closure for it; it is not part of any rollout`)
	}
	return out
}

// pubkeyRE: the two sides explain a bad pubkey in their own words.
var pubkeyRE = regexp.MustCompile(`^(host "(?:[^"\\]|\\.)*": pubkey: ).*$`)

func comparableProblems(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = pubkeyRE.ReplaceAllString(p, "$1…")
	}
	return out
}

// checkGolden compares the JSON document got, indented, with the golden
// file (relative to the repository), or rewrites it with -update.
func checkGolden(t *testing.T, file string, got []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, got, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	path := filepath.Join(repoRoot, filepath.FromSlash(file))
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./nix -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("%s (-golden +mkFleet; go test ./nix -update rewrites it):\n%s", file, diff)
	}
}

// checkWavesAgree resolves each channel's policy waves with the Go
// selectors (rfcs/0001 §2.1) as mkFleet does (the channel's hosts, each
// in the first wave that matches it, with the policy wave's name, soak,
// windows, approval gate and reboot) and compares with waves.<channel>.
func checkWavesAgree(t *testing.T, f *proto.FleetResolved) {
	t.Helper()
	for _, ch := range sortedKeys(f.Channels) {
		policy := f.RolloutPolicies[f.Channels[ch].RolloutPolicy]
		taken := map[string]bool{}
		var want []proto.Wave
		for _, w := range policy.Waves {
			wave := proto.Wave{Hosts: []string{}, Name: w.Name, SoakMinutes: w.SoakMinutes, Windows: w.Windows, Approval: w.Approval, Reboot: w.Reboot}
			for _, h := range w.Selector.Resolve(f.Hosts) {
				if f.Hosts[h].Channel == ch && !taken[h] {
					taken[h] = true
					wave.Hosts = append(wave.Hosts, h)
				}
			}
			want = append(want, wave)
		}
		if diff := cmp.Diff(want, f.Waves[ch], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("waves.%s (-Go's resolution +mkFleet's):\n%s", ch, diff)
		}
	}
}

// checkManifests: one manifest per channel, whose host set is exactly the
// channel's built hosts, each in the wave of waves.<channel> that lists it
// (wave 0 when the list is empty: the channel rolls out all at once) and
// with its closure, and whose health gate is the channel policy's.
func checkManifests(t *testing.T, f *proto.FleetResolved, built []string, b *release.Bundle) {
	t.Helper()
	if len(b.Rollouts) != len(f.Channels) {
		t.Errorf("%d manifests for %d channels", len(b.Rollouts), len(f.Channels))
	}
	for _, a := range b.Rollouts {
		m, err := proto.DecodeRolloutManifest(a.Body)
		if err != nil {
			t.Fatalf("%s: %v", a.Path, err)
		}
		want := []proto.HostWave{}
		for _, h := range built {
			if f.Hosts[h].Channel != m.Channel {
				continue
			}
			idx := slices.IndexFunc(f.Waves[m.Channel], func(w proto.Wave) bool { return slices.Contains(w.Hosts, h) })
			if manifest.AllAtOnce(f, m.Channel) {
				idx = 0 // an empty wave list: one wave, every host in it
			}
			want = append(want, proto.HostWave{Hostname: h, WaveIndex: idx, TargetClosure: fakeClosure(h)})
		}
		if diff := cmp.Diff(want, m.HostSet, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s hostSet (-want +got):\n%s", a.Path, diff)
		}
		gate := f.RolloutPolicies[f.Channels[m.Channel].RolloutPolicy].HealthGate
		if diff := cmp.Diff(gate, m.HealthGate); diff != "" {
			t.Errorf("%s healthGate (-policy's +manifest's):\n%s", a.Path, diff)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
