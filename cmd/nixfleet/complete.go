package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
)

// Completion of the operator commands' arguments from the control plane
// (rfcs/0009 §The command itself): the rollout commands complete rollout
// ids (short, as text shows them), host show and explain complete host
// names. The completion scripts run "nixfleet … --generate-bash-completion"
// (urfave/cli) and filter its words by the word being typed, which they
// also pass in completeWordEnv so that one small request finds the words
// that start with it. A completion asks once, within completeTimeout, for
// at most completeLimit words, and says nothing at all when anything
// fails: no connection settings, no answer, an error answer.

const (
	// completeWordEnv holds the word being completed (the scripts set it;
	// unset, every word is a candidate).
	completeWordEnv = "NIXFLEET_COMPLETE_WORD"
	completeTimeout = 2 * time.Second
	completeLimit   = 50
)

// completeArg makes the completion of a command's one positional argument
// with the words list finds: flags when a flag is being typed (urfave/cli's
// own completion), nothing once the argument is given, else list's words
// that start with the word being typed.
func completeArg(list func(ctx context.Context, o *operator, prefix string) ([]string, error)) cli.BashCompleteFunc {
	return func(c *cli.Context) {
		word, set := os.LookupEnv(completeWordEnv)
		if set && strings.HasPrefix(word, "-") || !set && len(os.Args) > 2 && strings.HasPrefix(os.Args[len(os.Args)-2], "-") {
			cli.DefaultCompleteWithFlags(c.Command)(c)
			return
		}
		if c.NArg() > 0 {
			return
		}
		o, err := dial(c)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(c.Context, completeTimeout)
		defer cancel()
		words, err := list(ctx, o, word)
		if err != nil {
			return
		}
		for _, w := range words {
			if strings.HasPrefix(w, word) {
				fmt.Fprintln(c.App.Writer, w)
			}
		}
	}
}

// completeRolloutIDs lists the newest rollouts, of the channel before the
// "@" when the prefix names one, by their short ids (the whole id when
// the prefix is longer than a short id).
func completeRolloutIDs(ctx context.Context, o *operator, prefix string) ([]string, error) {
	q := proto.RolloutQuery{Limit: completeLimit}
	if ch, _, ok := strings.Cut(prefix, "@"); ok {
		q.Channel = ch
	}
	p, _, err := o.api.RolloutPage(ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(p.Rollouts))
	for _, r := range p.Rollouts {
		if id := shortID(r.ID); len(prefix) <= len(id) {
			out = append(out, id)
		} else {
			out = append(out, r.ID)
		}
	}
	return out, nil
}

// completeHostNames lists the hosts whose names start with prefix, by
// name: one page, starting just before the prefix (hosts list in byte
// order).
func completeHostNames(ctx context.Context, o *operator, prefix string) ([]string, error) {
	p, _, err := o.api.HostPage(ctx, proto.HostQuery{Limit: completeLimit, After: justBefore(prefix)})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(p.Hosts))
	for _, h := range p.Hosts {
		out = append(out, h.Hostname)
	}
	return out, nil
}

// justBefore is a name that sorts just before every name that starts with
// prefix and after almost every other name before them: the prefix with
// its last byte one less, then "~" (the greatest printable ASCII byte).
// "" when the prefix is empty or does not end in printable ASCII (the page
// then starts at the first host).
func justBefore(prefix string) string {
	n := len(prefix)
	if n == 0 || prefix[n-1] <= ' ' || prefix[n-1] > '~' {
		return ""
	}
	return prefix[:n-1] + string(rune(prefix[n-1]-1)) + "~"
}
