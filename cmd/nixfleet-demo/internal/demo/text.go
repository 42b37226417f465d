package demo

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// header describes the demo's set-up and fleet.
func (d *session) header() {
	var b strings.Builder
	fmt.Fprintf(&b, "nixfleet-demo: %d simulated hosts and a control plane, all in this process\n", len(d.fleet.hosts))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  directory\t%s\n", d.dir)
	fmt.Fprintf(tw, "  control plane\t%s (embedded SQLite, TLS; agents authenticate with their host keys)\n", d.url)
	for _, c := range d.fleet.channels {
		var waves []string
		for _, w := range c.waves {
			waves = append(waves, fmt.Sprintf("%s (%d)", w.name, len(w.hosts)))
		}
		fmt.Fprintf(tw, "  %s\t%d hosts; waves %s; onHealthFailure %s\n", c.name, len(c.hosts), strings.Join(waves, " → "), c.onHealthFailure)
	}
	fmt.Fprintf(tw, "  ordering\t%s\n", d.orderingText())
	fmt.Fprintf(tw, "  budgets\t%s\n", d.budgetText())
	tw.Flush()
	d.view.printf("%s", b.String())
}

// orderingText sums up the channel edge and the host edges.
func (d *session) orderingText() string {
	gated := map[string]int{}
	var gates []string
	for _, e := range d.fleet.edges {
		if gated[e.Gates] == 0 {
			gates = append(gates, e.Gates)
		}
		gated[e.Gates]++
	}
	slices.Sort(gates)
	parts := []string{prodChannel + " follows " + stagingChannel}
	for _, g := range gates {
		parts = append(parts, fmt.Sprintf("%s before %d web hosts", g, gated[g]))
	}
	return strings.Join(parts, "; ")
}

// budgetText sums up the disruption budgets.
func (d *session) budgetText() string {
	stg := len(d.fleet.channel(stagingChannel).hosts)
	prod := fmt.Sprintf("prod at most %d host(s) in flight (20%%)", d.fleet.prodLimit)
	if d.fleet.budgets[0].MaxInFlightPct == nil {
		prod = "prod one host at a time (20% would round down to none)"
	}
	return fmt.Sprintf("%s, staging %d (50%%), databases one at a time", prod, stg*50/100)
}

// summary prints the outcome: every rollout with its state and hosts.
func (d *session) summary(w io.Writer, rep report) {
	d.view.flush()
	status := "ok"
	if !rep.OK {
		status = "FAILED (" + rep.Code + ")"
	}
	fmt.Fprintf(w, "\n%s\n", d.view.paint(ansiBold, fmt.Sprintf("summary: %s in %.2fs", status, rep.DurationSeconds)))
	if len(rep.Rollouts) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  ROLLOUT\tRELEASE\tSTATE\tTOOK\tHOSTS")
		for _, r := range rep.Rollouts {
			by := map[reconciler.HostState]int{}
			for s, n := range r.Counts {
				by[reconciler.HostState(s)] = n
			}
			took := fmt.Sprintf("%.2fs", r.DurationSeconds)
			if !r.Terminal {
				took += " so far"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.Release+" "+r.Role), r.State, took, countsText(by, r.Hosts))
		}
		tw.Flush()
	}
	if rep.OK {
		bad := d.fleet.channel(stagingChannel)
		fmt.Fprintf(w, "v1 reached all %d hosts, wave by wave within the budgets; v2 failed the health gate on %s\n"+
			"and the policy (%s) rolled it back before any other host took it.\n", len(d.fleet.hosts), bad.canary, bad.onHealthFailure)
	}
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return strings.TrimSpace(s)
}

// explain prints, with --keep, how to explore the running control plane.
func (d *session) explain(w io.Writer) {
	d.view.flush()
	bad := proto.ShortRolloutID(rolloutID(stagingChannel, v2))
	prod := proto.ShortRolloutID(rolloutID(prodChannel, v1))
	canary := d.fleet.channel(stagingChannel).canary
	prodHosts := d.fleet.channel(prodChannel).hosts
	someProd := prodHosts[len(prodHosts)-1]
	lines := [][2]string{
		{"export NIXFLEET_CONFIG=" + shellQuote(d.configFile), ""},
		{"nixfleet status", "every channel and its latest rollout"},
		{"nixfleet rollout list", ""},
		{"nixfleet rollout events " + bad, "why v2 was rolled back"},
		{"nixfleet host explain " + canary, "the canary, back on v1"},
		{"nixfleet host show " + someProd, ""},
		{"nixfleet rollout show " + prod, "hosts, waves, budgets"},
		{"nixfleet rollout rollback " + prod, "take prod back to v0 by hand..."},
		{"nixfleet rollout events " + prod + " --follow", "...and watch it"},
		{"nixfleet ui", "the dashboard, signed in with the operator key"},
	}
	fmt.Fprintf(w, "\nThe control plane (%s) and %d agents keep running until Ctrl-C; their journal follows below.\n", d.url, len(d.fleet.hosts))
	fmt.Fprintf(w, "In another terminal, with nixfleet built from this tree (go build -o nixfleet ./cmd/nixfleet):\n\n")
	printCommands(w, lines)
	prod3 := proto.ShortRolloutID(rolloutID(prodChannel, version(3, false)))
	fmt.Fprintf(w, "\nPlay CI and the on-call operator (nixfleet-demo is this command; from the tree, go run ./cmd/nixfleet-demo):\n\n")
	printCommands(w, [][2]string{
		{"export " + DirEnv + "=" + shellQuote(d.dir), "the demo push and promote act on (else the newest in $TMPDIR)"},
		{"nixfleet-demo push", "CI signs v3 and it goes to staging: every wave soaks a minute"},
		{"nixfleet-demo promote", "then to prod, which opens it once staging converged..."},
		{"NIXFLEET_CONFIG=" + shellQuote(d.approverConfig) + " \\", ""},
		{"  nixfleet rollout approve " + prod3 + " --wave 1 --comment 'looks good'", "...and holds its wave 1 for an approver"},
		{"nixfleet-demo push --bad", "a release whose hosts fail their health probe"},
	})
	fmt.Fprintf(w, "\nNotifications: the control plane sends the journal's rollouts opened, waves promoted, halts,\n"+
		"reverts, convergences and analyses to a webhook sink of the demo's, which checks each one's HMAC\n"+
		"signature and writes it to a log (tail -f %s). A control plane's configuration\n"+
		"file (nixfleet-cp serve --config FILE) declares such a sink like this:\n\n%s\n",
		shellQuote(filepath.Join(d.dir, "notifications.log")), indent(d.notifyLog.example(), "  "))
	fmt.Fprintf(w, "\nThe dashboard, signed in as %s (the link works once, within an hour; the browser\n"+
		"warns about the demo's own certificate, cert.pem):\n\n  %s\n", operatorName, d.dashboard)
	fmt.Fprintf(w, "\nIn %s: config.toml and approver.toml (the operator's and the approver's\n"+
		"configurations), operator_key, approver_key, cert.pem (the server's certificate), trust.json,\n"+
		"operators.json, fleet/ (the fleet repository) and ci_key.pem (CI's signing key), cp.db and cp.log\n"+
		"(the control plane's database and log), notifications.log and notify-secret (the sink's log and\n"+
		"the key of its signatures), demo.json (what nixfleet-demo push reads).\n", d.dir)
}

// printCommands prints commands, each with its comment aligned.
func printCommands(w io.Writer, lines [][2]string) {
	width := 0
	for _, l := range lines {
		if l[1] != "" {
			width = max(width, len(l[0]))
		}
	}
	for _, l := range lines {
		if l[1] == "" {
			fmt.Fprintf(w, "  %s\n", l[0])
			continue
		}
		fmt.Fprintf(w, "  %-*s  # %s\n", width, l[0], l[1])
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
