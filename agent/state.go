// Package agent is the nixfleet agent (rfcs/0008-agent.md): it checks in
// with the control plane, verifies every target against its own trust
// roots, realises and activates Nix closures, confirms them, and rolls the
// host back when it cannot.
//
// The decisions are a pure function (Decide, Recover, OnFailure) from the
// agent's State, what it observes of the host, and the control plane's
// answer, to Steps; the Runner executes the steps with an Executor (the
// real one runs nix) and writes the State atomically before every step
// that cannot be undone, so an agent killed anywhere resumes correctly.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// Phase is where the agent is in an activation.
type Phase string

// The phases. Every phase but PhaseIdle names an activation (State.Target).
const (
	// PhaseIdle: nothing in progress.
	PhaseIdle Phase = "idle"
	// PhaseActivating: the profile is about to be set, or set, and the
	// switch started; written before either.
	PhaseActivating Phase = "activating"
	// PhaseConfirming: the host runs the target; the confirm is due.
	PhaseConfirming Phase = "confirming"
	// PhaseRollingBack: returning to State.Previous; written before the
	// profile is set back.
	PhaseRollingBack Phase = "rolling_back"
	// PhaseDeferred: the target is the boot entry; it runs after a reboot.
	PhaseDeferred Phase = "deferred"
)

// State is what the agent keeps in its state directory (state.json).
type State struct {
	Phase Phase `json:"phase"`
	// Target is the activation in progress (nil when idle).
	Target *proto.Target `json:"target,omitempty"`
	// Previous is the system (a full store path) the host ran before
	// Target: what a rollback returns to.
	Previous string `json:"previous,omitempty"`
	// Since is when the phase began.
	Since time.Time `json:"since"`
	// Why is the reason of a rollback in progress (a stable code).
	Why string `json:"why,omitempty"`
	// Done is the token of the last activation the agent finished
	// (confirmed, refused, failed or rolled back): a target with this
	// token is not acted on again.
	Done string `json:"done,omitempty"`
	// Quarantine lists closures that failed here; they are not activated
	// again before Until unless the control plane's target changes to
	// another closure and back after that.
	Quarantine []proto.Quarantine `json:"quarantine"`
	// Known are systems this host ran (full store paths, newest last, at
	// most knownMax): the only closures a rollback target may name.
	Known []string `json:"known"`
}

// knownMax bounds State.Known.
const knownMax = 16

// idle returns the state with no activation in progress, done with token.
func (s State) idle(now time.Time, token string) State {
	s.Phase, s.Target, s.Previous, s.Why, s.Since = PhaseIdle, nil, "", "", now
	if token != "" {
		s.Done = token
	}
	return s
}

// remember adds a system to Known.
func (s *State) remember(path string) {
	if path == "" {
		return
	}
	out := make([]string, 0, len(s.Known)+1)
	for _, k := range s.Known {
		if k != path {
			out = append(out, k)
		}
	}
	out = append(out, path)
	if len(out) > knownMax {
		out = out[len(out)-knownMax:]
	}
	s.Known = out
}

// knows reports whether the host ran a system.
func (s State) knows(path string) bool {
	for _, k := range s.Known {
		if k == path {
			return true
		}
	}
	return false
}

// quarantined reports whether a closure (basename) is held back at now.
func (s State) quarantined(closure string, now time.Time) (time.Time, bool) {
	for _, q := range s.Quarantine {
		if q.Closure == closure && now.Before(q.Until) {
			return q.Until, true
		}
	}
	return time.Time{}, false
}

// quarantine holds a closure back until until, and forgets expired
// entries.
func (s *State) quarantine(closure string, until, now time.Time) {
	out := []proto.Quarantine{}
	for _, q := range s.Quarantine {
		if q.Closure != closure && now.Before(q.Until) {
			out = append(out, q)
		}
	}
	s.Quarantine = append(out, proto.Quarantine{Closure: closure, Until: until.UTC()})
}

// activeQuarantine is the quarantine list at now, for check-ins.
func (s State) activeQuarantine(now time.Time) []proto.Quarantine {
	out := []proto.Quarantine{}
	for _, q := range s.Quarantine {
		if now.Before(q.Until) {
			out = append(out, q)
		}
	}
	return out
}

const stateFile = "state.json"

// LoadState reads the state directory's state; a directory without one is
// idle.
func LoadState(dir string) (State, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return State{Phase: PhaseIdle, Quarantine: []proto.Quarantine{}, Known: []string{}}, nil
	}
	if err != nil {
		return State{}, err
	}
	var s State
	if err := proto.Decode(b, &s); err != nil {
		return State{}, fmt.Errorf("agent: %s: %w", filepath.Join(dir, stateFile), err)
	}
	switch s.Phase {
	case PhaseIdle:
	case PhaseActivating, PhaseConfirming, PhaseRollingBack, PhaseDeferred:
		if s.Target == nil {
			return State{}, fmt.Errorf("agent: %s: phase %s without a target", filepath.Join(dir, stateFile), s.Phase)
		}
	default:
		return State{}, fmt.Errorf("agent: %s: unknown phase %q", filepath.Join(dir, stateFile), s.Phase)
	}
	if s.Quarantine == nil {
		s.Quarantine = []proto.Quarantine{}
	}
	if s.Known == nil {
		s.Known = []string{}
	}
	return s, nil
}

// SaveState writes the state atomically: a temporary file in the same
// directory, synced, renamed over state.json, and the directory synced.
func SaveState(dir string, s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, stateFile), append(b, '\n'))
}

// writeAtomic replaces path with data, so that a reader (or a restart)
// sees the old file or the new one, never a part.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
