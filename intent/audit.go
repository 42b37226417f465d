package intent

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// Finding is one thing an audit found wrong, about an intent or a
// rollout.
type Finding struct {
	// Intent or Rollout is what it is about.
	Intent  string `json:"intent,omitempty"`
	Rollout string `json:"rollout,omitempty"`
	// Unsigned is set for an intent filed without a signature (a
	// dashboard session's, or under --insecure-dev): not a forgery, but
	// nothing proves who filed it.
	Unsigned bool   `json:"unsigned,omitempty"`
	Problem  string `json:"problem"`
}

// Report is an audit's outcome.
type Report struct {
	Intents  int       `json:"intents"`
	Verified int       `json:"verified"`
	Findings []Finding `json:"findings"`
}

// Audit checks a control plane's record of intents against the operators'
// public keys (rfcs/0007 §Signed intents): every signed intent must
// verify with its operator's key and say what the record says (kind,
// rollout, wave, comment, id = nonce, signed by the key of the operator
// it names, filed within
// proto.MaxIntentSkew of its signing); every approval and freeze break a
// rollout records must come from such an intent, of the right kind, by
// the same operator, for the same rollout and wave. A control plane that
// invents or alters an intent, an approval or a break is caught; one
// that drops an intent is not (nothing signed says it existed).
func Audit(keys map[string]ed25519.PublicKey, ex proto.AuditExport) Report {
	rep := Report{Intents: len(ex.Intents), Findings: []Finding{}}
	verified := map[string]proto.IntentDocument{}
	actors := map[string]string{} // intent id -> the operator whose key signed it
	for _, e := range ex.Intents {
		in := e.Intent
		add := func(format string, args ...any) {
			rep.Findings = append(rep.Findings, Finding{Intent: in.ID, Rollout: in.RolloutID, Problem: fmt.Sprintf(format, args...)})
		}
		if e.Signed == nil {
			rep.Findings = append(rep.Findings, Finding{Intent: in.ID, Rollout: in.RolloutID, Unsigned: true,
				Problem: fmt.Sprintf("%s by %s is not signed", in.Kind, in.Actor)})
			continue
		}
		key, ok := keys[in.Actor]
		if !ok {
			add("%s is filed by %q, who is not in the operators file", in.Kind, in.Actor)
			continue
		}
		d, err := Verify(key, *e.Signed)
		if err != nil {
			add("%s by %s: %v", in.Kind, in.Actor, err)
			continue
		}
		var diffs []string
		check := func(what string, same bool) {
			if !same {
				diffs = append(diffs, what)
			}
		}
		check("id (the nonce)", d.Nonce == in.ID)
		check("kind", d.Kind == in.Kind)
		check("rollout", d.RolloutID == in.RolloutID)
		check("comment", d.Comment == in.Comment)
		check("wave", (d.Wave == nil) == (in.Wave == nil) && (d.Wave == nil || *d.Wave == *in.Wave))
		skew := in.At.Sub(d.IssuedAt)
		check("time (filed more than 5 minutes from its signing)", skew <= proto.MaxIntentSkew && skew >= -proto.MaxIntentSkew)
		if len(diffs) > 0 {
			add("the record differs from what %s signed: %v", in.Actor, diffs)
			continue
		}
		verified[in.ID], actors[in.ID] = d, in.Actor
		rep.Verified++
	}
	for _, r := range ex.Rollouts {
		for _, a := range r.Approvals {
			d, ok := verified[a.Intent]
			switch {
			case !ok:
				rep.Findings = append(rep.Findings, Finding{Rollout: r.ID, Intent: a.Intent,
					Problem: fmt.Sprintf("approval of wave %d by %s has no verified signed intent", a.Wave, a.Actor)})
			case d.Kind != "approve" || d.RolloutID != r.ID || actors[a.Intent] != a.Actor || d.Wave == nil || *d.Wave != a.Wave:
				rep.Findings = append(rep.Findings, Finding{Rollout: r.ID, Intent: a.Intent,
					Problem: fmt.Sprintf("approval of wave %d by %s is not what intent %s signed (%s of %s by %s)", a.Wave, a.Actor, a.Intent, d.Kind, d.RolloutID, actors[a.Intent])})
			}
		}
		if b := r.FreezeBreak; b != nil {
			d, ok := verified[b.Intent]
			if !ok || d.Kind != "break-freeze" || actors[b.Intent] != b.Actor || d.RolloutID != r.ID {
				rep.Findings = append(rep.Findings, Finding{Rollout: r.ID, Intent: b.Intent,
					Problem: fmt.Sprintf("freeze break by %s has no verified signed break-freeze intent for this rollout", b.Actor)})
			}
		}
	}
	slices.SortStableFunc(rep.Findings, func(a, b Finding) int {
		if a.Unsigned != b.Unsigned { // forgeries first
			if a.Unsigned {
				return 1
			}
			return -1
		}
		return 0
	})
	return rep
}

// Forged reports whether the audit found anything but unsigned intents.
func (r Report) Forged() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return !f.Unsigned })
}

// OperatorKeys reads an operators file (a JSON array of {name, key, role};
// a key is an OpenSSH ed25519 line or {"algorithm": "ed25519", "public":
// base64}) into the keys an audit needs, by name.
func OperatorKeys(data []byte) (map[string]ed25519.PublicKey, error) {
	var ops []struct {
		Name string          `json:"name"`
		Key  json.RawMessage `json:"key"`
	}
	if err := json.Unmarshal(data, &ops); err != nil {
		return nil, fmt.Errorf("operators file: %w", err)
	}
	out := map[string]ed25519.PublicKey{}
	for i, op := range ops {
		var line string
		var pub ed25519.PublicKey
		if err := json.Unmarshal(op.Key, &line); err == nil {
			k, err := trust.ParseSSHEd25519(line)
			if err != nil {
				return nil, fmt.Errorf("operators file: operator %d (%q): %w", i, op.Name, err)
			}
			pub = k
		} else {
			var k proto.PublicKey
			if json.Unmarshal(op.Key, &k) != nil || k.Algorithm != proto.AlgorithmEd25519 {
				return nil, fmt.Errorf("operators file: operator %d (%q): key must be \"ssh-ed25519 …\" or {\"algorithm\":\"ed25519\",\"public\":…}", i, op.Name)
			}
			b, err := base64.StdEncoding.DecodeString(k.Public)
			if err != nil || len(b) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("operators file: operator %d (%q): the key is not base64 of 32 bytes", i, op.Name)
			}
			pub = b
		}
		if op.Name == "" || out[op.Name] != nil {
			return nil, fmt.Errorf("operators file: operator %d: missing or duplicate name %q", i, op.Name)
		}
		out[op.Name] = pub
	}
	return out, nil
}
