package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The commands that read what the control plane recorded beyond
// rollouts: every ref it saw (releases) and the whole journal (events).

func releasesCommand() *cli.Command {
	return opCommand(&cli.Command{
		Name:  "releases",
		Usage: "every push of a channel ref the control plane read, newest first, and what became of it",
		Description: "A ref opened a rollout, waits for the channel's rollout, is deferred by a\n" +
			"channel edge, was superseded by a newer ref before it opened, or was refused\n" +
			"(with its code). A pending ref is verified and waits for the next tick. A ref\n" +
			"pushed back to an earlier commit is a row of its own (refused: replayed_release).",
		Flags: []cli.Flag{&cli.StringFlag{Name: "channel", Usage: "only the refs of channel `C`"}},
	}, nil, runReleases)
}

func runReleases(c *cli.Context, o *operator, _ []string) error {
	rels, done, err := listed(c, o, "no releases seen", func() ([]proto.Release, json.RawMessage, error) {
		return o.api.Releases(c.Context, proto.ReleaseQuery{Channel: c.String("channel")})
	})
	if done {
		return err
	}
	t := newTable("SEEN", "CHANNEL", "ROLLOUT", "COMMIT", "FATE", "BY", "NOW", "REASON")
	t.paint[4] = o.st.state
	for _, r := range rels {
		t.add(when(r.SeenAt), r.Channel, dash(shortID(r.RolloutID)), dash(shortCommit(r.Commit)), r.Fate, dash(shortRef(r.By)),
			releaseNow(r), reasonLine(r.Reason.Code, r.Reason.Message))
	}
	t.write(c.App.Writer)
	return nil
}

// releaseNow is how an opened release stands now, or how it ended: its
// rollout's state as people read it, who moved it there, and "latest"
// for its channel's latest rollout; "-" for a release that did not open.
func releaseNow(r proto.Release) string {
	ro := r.Rollout
	if ro == nil {
		return "-"
	}
	out := reconciler.ShownState(ro.State, ro.Reason.Code)
	if ro.Reason.Actor != "" {
		out += " by " + ro.Reason.Actor
	}
	if ro.Latest {
		out += ", latest"
	}
	return out
}

// shortCommit is a git commit's first 12 hex digits, as the control
// plane's messages name commits.
func shortCommit(h string) string { return h[:min(len(h), 12)] }

// shortRef is what a release's BY names, short: a rollout (shortID) or a
// commit (shortCommit).
func shortRef(by string) string {
	if strings.Contains(by, "@") {
		return shortID(by)
	}
	return shortCommit(by)
}

func eventsCommand() *cli.Command {
	return opCommand(&cli.Command{
		Name:  "events",
		Usage: "the whole journal: every rollout's events and what belongs to none (refused and superseded refs)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "stream new events as they are written, until interrupted"},
			&cli.Int64Flag{Name: "after", Usage: "only events after the event `ID` (to resume)"},
			&cli.StringFlag{Name: "channel", Usage: "only the events of channel `C`"},
			&cli.StringFlag{Name: "host", Usage: "only the events of host `H`"},
		},
	}, nil, runEvents)
}

func runEvents(c *cli.Context, o *operator, _ []string) error {
	q := proto.EventQuery{AfterID: c.Int64("after"), Channel: c.String("channel"), Host: c.String("host")}
	if q.AfterID < 0 {
		return usage(c, "--after must be an event id (0 or more)")
	}
	if c.Bool("follow") {
		return followFeed(c, o, q)
	}
	fetch := func(q proto.EventQuery) ([]proto.Event, json.RawMessage, error) { return o.api.Events(c.Context, q) }
	all, err := allEvents(c, o, q, fetch, "")
	if err != nil || c.Bool("json") {
		return err
	}
	l := layoutFor(eventHosts(all), o.st.width).withAbout()
	printEvents(c.App.Writer, all, l.header(), func(ev proto.Event) string { return l.line(o.st, ev) })
	return nil
}

// followFeed streams the journal until interrupted; with --json, each
// event as the server sent it, one per line. A lost connection is an
// error whose hint says how to resume.
func followFeed(c *cli.Context, o *operator, q proto.EventQuery) error {
	ctx, w, asJSON := c.Context, c.App.Writer, c.Bool("json")
	// Hosts yet to come are not known: the host column takes its widest.
	l := layoutFor([]string{strings.Repeat("x", maxHostWidth)}, o.st.width).withAbout()
	if !asJSON {
		fmt.Fprintln(w, l.header())
	}
	err := o.api.FollowEvents(ctx, q, printEvent(w, o.st, l, asJSON, &q.AfterID))
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("the control plane ended the stream")
	}
	return o.fail(c, err, fmt.Sprintf("resume with: nixfleet events --follow --after %d", q.AfterID))
}
