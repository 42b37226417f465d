package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
)

// runRolloutPlan is "nixfleet rollout plan ID": the control plane's latest
// forecast of a rollout (rfcs/0014), or its --json as the API gives it.
func runRolloutPlan(c *cli.Context, o *operator, args []string) error {
	f, raw, err := o.api.Forecast(c.Context, args[0])
	if err != nil {
		return o.fail(c, err, notFoundHint(err, "no such rollout, or no forecast of it yet (the leader makes one after a tick that decides something): see 'nixfleet rollout list'"))
	}
	if c.Bool("json") {
		return writeRaw(c.App.Writer, raw)
	}
	writeForecast(c.App.Writer, f)
	return nil
}

// writeForecast prints a forecast for people: times in UTC and relative to
// when it was made.
func writeForecast(w io.Writer, f proto.Forecast) {
	rel := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return when(*t) + " (+" + span(t.Sub(f.MadeAt)) + ")"
	}
	fs := &fields{}
	fs.add("rollout", f.RolloutID)
	fs.add("made", when(f.MadeAt))
	if f.End != nil {
		fs.add("ends", rel(f.End)+", "+f.State)
	} else {
		why := "-"
		if f.Waiting != nil {
			why = reasonLine(f.Waiting.Code, f.Waiting.Message)
		}
		fs.add("ends", fmt.Sprintf("not within the forecast (%s, %s): waits for %s", f.State, dash(f.Cut), why))
	}
	if f.FirstEnd != nil && f.End != nil && !f.FirstEnd.Equal(*f.End) {
		d := f.End.Sub(*f.FirstEnd)
		sign := "+"
		if d < 0 {
			sign, d = "-", -d
		}
		fs.add("first", fmt.Sprintf("%s, made %s (now %s%s)", when(*f.FirstEnd), when(f.FirstMadeAt), sign, span(d)))
	}
	a := f.Assumes
	reboot := ""
	if a.Reboot != "" {
		reboot = ", " + a.Reboot + " to reboot,"
	}
	fs.add("assumes", fmt.Sprintf("a host takes %s to switch%s%s and checks in every %s; approvals: %s; silent hosts: %s",
		a.Activation, measured(a.Measured), reboot, a.Checkin, a.Approvals, a.Silent))
	fs.write(w)
	t := newTable("WAVE", "START", "DONE", "GATE")
	for _, wv := range f.Waves {
		label := strconv.Itoa(wv.Index)
		if wv.Name != "" {
			label += " (" + wv.Name + ")"
		}
		gate := "-"
		if wv.Gate != nil {
			gate = reasonLine(wv.Gate.Gate, wv.Gate.Message)
		}
		t.add(label, rel(wv.Start), rel(wv.Done), gate)
	}
	fmt.Fprintln(w)
	t.write(w)
	if f.HostsOmitted > 0 {
		fmt.Fprintf(w, "\n%d host(s) listed in --json, %d more left out\n", len(f.Hosts), f.HostsOmitted)
	}
}

// measured says how many hosts a forecast took their own measured time for.
func measured(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of its hosts: their own measured time)", n)
}
