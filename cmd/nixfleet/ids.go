package main

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
)

// Rollout ids in text (rfcs/0009 §Human output 5). A rollout's id is its
// channel and its ref, a 40-digit commit: text shows the ref's first 7
// digits, as git abbreviates a commit (stable@1111111), and every command
// that takes an ID takes that form back. --json keeps ids whole.

// shortID is a rollout id as text shows it (proto.ShortRolloutID).
func shortID(id string) string { return proto.ShortRolloutID(id) }

// fullRolloutID is the rollout an ID argument names. An id whose ref is
// 4 to 39 hex digits is taken as an abbreviation: the one rollout of its
// channel whose ref begins with them, else the one ref of the channel's
// release log that never opened (waiting, deferred, superseded: a
// break-freeze and its events name it so). Anything else, and an
// abbreviation nothing matches, is asked for as it is.
func (o *operator) fullRolloutID(c *cli.Context, arg string) (string, error) {
	ch, ref, ok := strings.Cut(arg, "@")
	if !ok || len(ref) < 4 || len(ref) >= 40 || strings.Trim(ref, "0123456789abcdef") != "" {
		return arg, nil
	}
	var found []string
	err := o.api.RolloutPages(c.Context, proto.RolloutQuery{Channel: ch, Limit: 1000}, func(p proto.RolloutList, _ json.RawMessage) bool {
		for _, r := range p.Rollouts {
			if strings.HasPrefix(r.ID, arg) {
				found = append(found, r.ID)
			}
		}
		return len(found) < 2
	})
	if err == nil && len(found) == 0 {
		var rels []proto.Release
		rels, _, err = o.api.Releases(c.Context, proto.ReleaseQuery{Channel: ch})
		for _, r := range rels {
			if strings.HasPrefix(r.RolloutID, arg) && !slices.Contains(found, r.RolloutID) {
				found = append(found, r.RolloutID)
			}
		}
	}
	switch {
	case err != nil:
		return "", o.fail(c, err, "")
	case len(found) > 1:
		return "", usage(c, "%s is the start of more than one rollout's id (%s, %s): give more of the ref", arg, found[0], found[1])
	case len(found) == 1:
		return found[0], nil
	}
	return arg, nil
}
