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
	// BootID is the kernel's boot id when the phase began, in the phases
	// of a reboot (rfcs/0008 §Reboots): in rebooting and rebooting_back,
	// the boot before the reboot; in boot_confirming, the boot into the
	// target.
	BootID string `json:"bootId,omitempty"`
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
	// Prefetched is the closure the agent realised ahead of its dispatch
	// and holds with a GC root in the state directory (rfcs/0008
	// §Prefetch); nil when none. The root follows it: removed when it is
	// dropped, and at start-up when it is nil.
	Prefetched *Prefetched `json:"prefetched,omitempty"`
}

// knownMax bounds State.Known.
const knownMax = 16

// move is the one way a State changes phase: to the phase the table
// gives for ev (Phase.Next), since now. It refuses a move the table does
// not hold with ErrIllegalTransition, and returns s unchanged then. The
// helpers below move and set what the new phase needs.
func (s State) move(ev Event, now time.Time) (State, error) {
	ph, err := s.Phase.Next(ev)
	if err != nil {
		return s, err
	}
	s.Phase, s.Since = ph, now
	return s, nil
}

// finish moves on ev to idle: no activation in progress, done with t's
// token (t is the activation that ends, or the target dismissed).
func (s State) finish(ev Event, t *proto.Target, now time.Time) (State, error) {
	next, err := s.move(ev, now)
	if err != nil {
		return s, err
	}
	next.Target, next.Previous, next.Why, next.BootID = nil, "", "", ""
	if t != nil && t.Token != "" {
		next.Done = t.Token
	}
	return next, nil
}

// begin moves on ev from idle to an activation of t from the system
// previous, which the host ran.
func (s State) begin(ev Event, t *proto.Target, previous string, now time.Time) (State, error) {
	next, err := s.move(ev, now)
	if err != nil {
		return s, err
	}
	next.Target, next.Previous, next.Why = t, previous, ""
	next.remember(previous)
	return next, nil
}

// rollingBack moves on ev to the rollback of the current activation, for
// why (a stable code).
func (s State) rollingBack(ev Event, why string, now time.Time) (State, error) {
	next, err := s.move(ev, now)
	if err != nil {
		return s, err
	}
	next.Why = why
	return next, nil
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
	case PhaseActivating, PhaseConfirming, PhaseRollingBack, PhaseDeferred,
		PhaseRebooting, PhaseBootConfirming, PhaseMakingDefault, PhaseRebootingBack:
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
