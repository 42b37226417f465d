package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// PushOptions configure Push and Promote, which act on a demo kept
// running (--keep) from another process, as CI and an operator would.
type PushOptions struct {
	// Dir is the demo's directory; "" finds it (see findDemo).
	Dir string
	// Bad makes a release whose hosts fail their health probe once they
	// run it (Push only).
	Bad bool
	// SoakMinutes is how long every wave of the release soaks (Push only).
	SoakMinutes int
	// Wait bounds how long to wait for the control plane to take the
	// push: to open its rollout, or to say why not yet.
	Wait time.Duration
}

// approvalWave is the wave of prod that the releases Push signs hold for
// an approver: the one after prod's canary.
const approvalWave = 1

// Push signs the demo's next release as CI does (the playground's policy:
// soaks of opts.SoakMinutes, an approval gate on prod's second wave) and
// pushes it to staging, as an operator's git push does; then it waits for
// the control plane to take it and says what to do next.
func Push(ctx context.Context, opts PushOptions, w io.Writer) error {
	dir, st, err := findDemo(opts.Dir)
	if err != nil {
		return err
	}
	if opts.SoakMinutes < 0 {
		return errorf(codes.Usage, "--soak must not be negative")
	}
	pemKey, err := os.ReadFile(filepath.Join(dir, ciKeyFile))
	if err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	key, err := trust.ParsePrivateKey(pemKey)
	if err != nil {
		return &Error{Code: codes.IOError, Err: fmt.Errorf("%s: %w", ciKeyFile, err)}
	}
	repo, err := fleetrepo.Open(filepath.Join(dir, "fleet"), key)
	if err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	// CI evaluates the fleet again: the last signed fleet, every host's
	// closure built anew.
	prev, err := os.ReadFile(filepath.Join(repo.Dir, "releases", release.FleetFile))
	if err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	v := version(st.Next, opts.Bad)
	unsigned, err := playground(prev, v, opts.SoakMinutes)
	if err != nil {
		return &Error{Code: codes.Internal, Err: err}
	}
	at := time.Now().UTC().Truncate(time.Second)
	if !at.After(st.LastSigned) {
		at = st.LastSigned.Add(time.Second)
	}
	commit, err := repo.Release(unsigned, commitOf(v), at)
	if err != nil {
		return &Error{Code: codes.Internal, Err: fmt.Errorf("signing %s: %w", v, err)}
	}
	if err := repo.Promote(stagingChannel, commit); err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	st.Next, st.Latest, st.LastSigned = st.Next+1, v, at
	if err := writeState(dir, st); err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	what := "its hosts run it as well as the others"
	if opts.Bad {
		what = "its hosts' health probe fails once they run it"
	}
	fmt.Fprintf(w, "CI signed %s (ciCommit %s, signedAt %s; %s);\nchannels/staging now points at its commit %s.\n",
		v, commitOf(v), at.Format(time.RFC3339), what, commit.String()[:12])
	return tell(ctx, dir, st, stagingChannel, commit, opts.Wait, w)
}

// Promote pushes the release staging's ref points at to prod, as an
// operator does once staging took it; then it waits for the control plane
// to take it and says what to do next.
func Promote(ctx context.Context, opts PushOptions, w io.Writer) error {
	dir, st, err := findDemo(opts.Dir)
	if err != nil {
		return err
	}
	repo, err := fleetrepo.Open(filepath.Join(dir, "fleet"), nil)
	if err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	commit, err := repo.Ref(stagingChannel)
	if err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	if cur, err := repo.Ref(prodChannel); err == nil && cur == commit {
		return &Error{Code: codes.AlreadyInState, Err: fmt.Errorf("channels/prod already points at staging's commit %s", commit.String()[:12]),
			Hint: "'nixfleet-demo push' signs a new release for staging first"}
	}
	if err := repo.Promote(prodChannel, commit); err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	fmt.Fprintf(w, "channels/prod now points at staging's commit %s.\n", commit.String()[:12])
	return tell(ctx, dir, st, prodChannel, commit, opts.Wait, w)
}

// tell waits up to wait for the control plane to open the rollout of a
// channel's push of commit, says what became of it on the way, and prints
// the commands that go on from there.
func tell(ctx context.Context, dir string, st state, channel string, commit plumbing.Hash, wait time.Duration, w io.Writer) error {
	op, err := operatorClient(dir, st, operatorKeyFile, operatorName)
	if err != nil {
		return &Error{Code: codes.IOError, Err: err}
	}
	cfg := "NIXFLEET_CONFIG=" + shellQuote(st.Config)
	deadline := time.Now().Add(wait)
	var rel proto.Release
	for said := ""; ; {
		rel, err = awaitRelease(ctx, op, channel, commit.String(), said, deadline)
		if err != nil {
			return err
		}
		switch {
		case rel.Fate == "":
			fmt.Fprintf(w, "The control plane has not taken it within %s; 'nixfleet releases' shows when it does.\n", wait)
			return nil
		case rel.Fate == said:
			fmt.Fprintf(w, "It has not opened within %s. Watch the channel with:\n  %s nixfleet events --channel %s --follow\n",
				wait, cfg, channel)
			return nil
		case rel.Fate != proto.FateOpened:
			fmt.Fprintf(w, "The control plane saw it: %s [%s] %s\n", rel.Fate, rel.Reason.Code, rel.Reason.Message)
			if rel.Fate == proto.FateRefused {
				return &Error{Code: rel.Reason.Code, Err: fmt.Errorf("the control plane refused the push: %s", rel.Reason.Message)}
			}
			if rel.Fate != proto.FateWaiting && rel.Fate != proto.FateDeferred {
				return nil // it will not open
			}
			said = rel.Fate
			continue
		}
		break
	}
	id := proto.ShortRolloutID(rel.RolloutID)
	fmt.Fprintf(w, "The control plane opened rollout %s.\n\nNext:\n", id)
	fmt.Fprintf(w, "  %s nixfleet rollout events %s --follow\n", cfg, id)
	if channel == stagingChannel {
		fmt.Fprintf(w, "  nixfleet-demo promote   # then the same release to prod (it opens once staging converged)\n")
	} else {
		fmt.Fprintf(w, "  NIXFLEET_CONFIG=%s nixfleet rollout approve %s --wave %d --comment 'looks good'\n"+
			"      # prod's wave %d waits for an approver: the demo's is %s\n",
			shellQuote(st.ApproverConfig), id, approvalWave, approvalWave, approverName)
	}
	return nil
}

// awaitRelease polls the release log until it lists the channel's push
// of commit with a fate other than pending and not, until deadline
// passes.
func awaitRelease(ctx context.Context, op *apiclient.Client, channel, commit, not string, deadline time.Time) (proto.Release, error) {
	var last proto.Release
	for {
		rels, _, err := op.Releases(ctx, proto.ReleaseQuery{Channel: channel})
		if err != nil && time.Now().After(deadline) {
			return last, &Error{Code: codes.Unavailable, Err: fmt.Errorf("asking the control plane about the push: %w", err),
				Hint: "the push stands; 'nixfleet releases' shows what became of it"}
		}
		if err == nil {
			for _, r := range rels { // newest first
				if r.Commit == commit && r.Fate != "" && r.Fate != proto.FatePending {
					if r.Fate != not {
						return r, nil
					}
					last = r
					break
				}
			}
		}
		if time.Now().After(deadline) {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, &Error{Code: codes.Interrupted, Err: ctx.Err()}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// playground is a fleet CI evaluated again at version v: every host's
// closure built at v, every wave soaking soak minutes, and prod's
// approvalWave held for an approver.
func playground(prev []byte, v string, soak int) ([]byte, error) {
	var fr proto.FleetResolved
	if err := json.Unmarshal(prev, &fr); err != nil {
		return nil, fmt.Errorf("the last signed fleet: %w", err)
	}
	for name, h := range fr.Hosts {
		c := fleetrepo.Closure(name, v)
		h.ClosureHash = &c
		fr.Hosts[name] = h
	}
	for ch, p := range fr.RolloutPolicies {
		for i := range p.Waves {
			p.Waves[i].SoakMinutes = soak
			if ch == prodChannel && i == approvalWave {
				p.Waves[i].Approval = &proto.Approval{Required: true}
			}
		}
		fr.RolloutPolicies[ch] = p
		for i := range fr.Waves[ch] {
			fr.Waves[ch][i].SoakMinutes = soak
			if ch == prodChannel && i == approvalWave {
				fr.Waves[ch][i].Approval = &proto.Approval{Required: true}
			}
		}
	}
	sv := proto.SchemaVersion
	fr.Meta = proto.Meta{SchemaVersion: &sv}
	return json.Marshal(fr)
}
