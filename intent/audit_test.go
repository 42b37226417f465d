package intent

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// signedEntry is an intent as a control plane records it after checking
// its signature.
func signedEntry(t *testing.T, actor string, priv ed25519.PrivateKey, d proto.IntentDocument, at time.Time) proto.IntentEntry {
	t.Helper()
	d.Nonce = NewNonce()
	s, err := Sign(priv, d)
	if err != nil {
		t.Fatal(err)
	}
	return proto.IntentEntry{Intent: proto.Intent{ID: d.Nonce, RolloutID: d.RolloutID, Kind: d.Kind, Actor: actor, At: at,
		Comment: d.Comment, Wave: d.Wave}, Signed: &s}
}

func TestAudit(t *testing.T) {
	alicePub, alice, _ := ed25519.GenerateKey(rand.Reader)
	carolPub, carol, _ := ed25519.GenerateKey(rand.Reader)
	keys := map[string]ed25519.PublicKey{"alice": alicePub, "carol": carolPub}
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	one := 1
	pause := signedEntry(t, "alice", alice, proto.IntentDocument{Kind: "pause", RolloutID: "prod@1", IssuedAt: now, Comment: "slow"}, now.Add(time.Second))
	approve := signedEntry(t, "carol", carol, proto.IntentDocument{Kind: "approve", RolloutID: "prod@1", Wave: &one, IssuedAt: now, Comment: "CAB ok"}, now.Add(2*time.Second))
	rollout := proto.Rollout{ID: "prod@1", Approvals: []proto.WaveApproval{{Wave: 1, Actor: "carol", At: now, Intent: approve.Intent.ID}}}
	good := proto.AuditExport{Intents: []proto.IntentEntry{pause, approve}, Rollouts: []proto.Rollout{rollout}}
	if rep := Audit(keys, good); rep.Forged() || rep.Verified != 2 || len(rep.Findings) != 0 {
		t.Fatalf("a true record: %+v", rep)
	}

	// One byte of a signed document changed: caught.
	tampered := good
	tampered.Intents = []proto.IntentEntry{pause, approve}
	bad := *approve.Signed
	bad.Document = strings.Replace(bad.Document, `"wave":1`, `"wave":2`, 1)
	tampered.Intents[1].Signed = &bad
	rep := Audit(keys, tampered)
	if !rep.Forged() || rep.Verified != 1 {
		t.Errorf("a changed byte: %+v", rep)
	}

	// The record says something else than what was signed: caught.
	altered := proto.AuditExport{Intents: []proto.IntentEntry{pause, approve}, Rollouts: good.Rollouts}
	altered.Intents[0].Intent.Comment = "someone else's words"
	if rep := Audit(keys, altered); !rep.Forged() || !strings.Contains(rep.Findings[0].Problem, "comment") {
		t.Errorf("an altered comment: %+v", rep)
	}

	// An approval the control plane invented, one moved to another wave,
	// and a freeze break without its intent: caught.
	invented := proto.AuditExport{Intents: []proto.IntentEntry{pause, approve}, Rollouts: []proto.Rollout{{ID: "prod@1",
		Approvals:   []proto.WaveApproval{{Wave: 1, Actor: "bob", Intent: "feedfeedfeedfeedfeedfeedfeedfeed"}, {Wave: 2, Actor: "carol", Intent: approve.Intent.ID}},
		FreezeBreak: &proto.FreezeBreak{Actor: "carol", Intent: pause.Intent.ID}}}}
	if rep := Audit(keys, invented); len(rep.Findings) != 3 {
		t.Errorf("invented approvals and a break: %+v", rep)
	}

	// An unsigned intent (a dashboard session's) is reported, not forged;
	// an intent signed by someone not in the operators file is forged.
	unsigned := proto.IntentEntry{Intent: proto.Intent{ID: "x1", RolloutID: "prod@1", Kind: "pause", Actor: "alice", At: now}}
	_, mallory, _ := ed25519.GenerateKey(rand.Reader)
	stranger := signedEntry(t, "mallory", mallory, proto.IntentDocument{Kind: "cancel", RolloutID: "prod@1", IssuedAt: now}, now)
	rep = Audit(keys, proto.AuditExport{Intents: []proto.IntentEntry{unsigned}})
	if rep.Forged() || len(rep.Findings) != 1 || !rep.Findings[0].Unsigned {
		t.Errorf("an unsigned intent: %+v", rep)
	}
	if rep := Audit(keys, proto.AuditExport{Intents: []proto.IntentEntry{stranger}}); !rep.Forged() {
		t.Errorf("a stranger's intent: %+v", rep)
	}
	// Filed long after it was signed: a replay the control plane should
	// have refused.
	late := signedEntry(t, "alice", alice, proto.IntentDocument{Kind: "resume", RolloutID: "prod@1", IssuedAt: now}, now.Add(time.Hour))
	if rep := Audit(keys, proto.AuditExport{Intents: []proto.IntentEntry{late}}); !rep.Forged() {
		t.Errorf("an intent filed an hour after its signing: %+v", rep)
	}
}
