package manifest

import (
	"fmt"
	"sort"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// Expect is what the verifier of a manifest already knows and must find
// confirmed. Zero fields are not checked.
type Expect struct {
	// RolloutID is the id the manifest was fetched under (file name, URL,
	// check-in response).
	RolloutID string
	// ContentHash is the manifest hash recorded when the rollout adopted
	// the manifest (lowercase hex SHA-256 of its canonical bytes).
	ContentHash string
	// Host, when set, must be in the hostSet with this wave and target.
	Host *HostExpect
	// FreshnessWindow, when positive, replaces the manifest's own window.
	FreshnessWindow time.Duration
}

// HostExpect is a host's own view of its place in a rollout.
type HostExpect struct {
	Hostname  string
	WaveIndex int
	// TargetClosure, when not empty, must equal the host's targetClosure.
	TargetClosure string
}

// Verify checks a signed rollout manifest: trust.Verify's pipeline (steps
// 1–9), then, in order,
//
//  10. trust.ErrRolloutIDMismatch: channelRef is not meta.ciCommit, or
//     "<channel>@<channelRef>" is not exp.RolloutID;
//  11. trust.ErrManifestHashMismatch: the content hash is not
//     exp.ContentHash;
//  12. trust.ErrHostNotInManifest: exp.Host is not in the hostSet at its
//     wave index with its target closure.
func Verify(artifact, sig []byte, roots *trust.Roots, exp Expect, now time.Time) (*trust.Result, error) {
	res, err := trust.Verify(artifact, sig, roots, trust.Policy{Kind: proto.KindRolloutManifest, FreshnessWindow: exp.FreshnessWindow}, now)
	if err != nil {
		return nil, err
	}
	if err := checkManifest(res, exp); err != nil {
		return nil, trust.Reject(res, err)
	}
	return res, nil
}

// Recheck judges at now a manifest that Verify accepted at an earlier time
// with the same roots (trust.Recheck), and checks exp: the verdict Verify
// would give at now, without reading the bytes again. res is what Verify
// returned, sig the signature it checked.
func Recheck(res *trust.Result, sig []byte, roots *trust.Roots, exp Expect, now time.Time) error {
	if err := trust.Recheck(res, sig, roots, trust.Policy{Kind: proto.KindRolloutManifest, FreshnessWindow: exp.FreshnessWindow}, now); err != nil {
		return err
	}
	if err := checkManifest(res, exp); err != nil {
		return trust.Reject(res, err)
	}
	return nil
}

func checkManifest(res *trust.Result, exp Expect) error {
	m := res.Manifest
	if m.Meta.CICommit == nil || m.ChannelRef != *m.Meta.CICommit {
		ci := "null"
		if m.Meta.CICommit != nil {
			ci = fmt.Sprintf("%q", *m.Meta.CICommit)
		}
		return fmt.Errorf("%w: channelRef %q is not meta.ciCommit %s", trust.ErrRolloutIDMismatch, m.ChannelRef, ci)
	}
	if exp.RolloutID != "" && m.RolloutID() != exp.RolloutID {
		return fmt.Errorf("%w: the manifest's fields give rollout %q, expected %q", trust.ErrRolloutIDMismatch, m.RolloutID(), exp.RolloutID)
	}
	if exp.ContentHash != "" && res.SHA256 != exp.ContentHash {
		return fmt.Errorf("%w: content hash %s, the rollout recorded %s", trust.ErrManifestHashMismatch, res.SHA256, exp.ContentHash)
	}
	if h := exp.Host; h != nil {
		return CheckHost(m, *h)
	}
	return nil
}

// CheckHost checks a host's membership in a verified manifest, whose
// hostSet is sorted by hostname.
func CheckHost(m *proto.RolloutManifest, h HostExpect) error {
	i := sort.Search(len(m.HostSet), func(i int) bool { return m.HostSet[i].Hostname >= h.Hostname })
	if i == len(m.HostSet) || m.HostSet[i].Hostname != h.Hostname {
		return fmt.Errorf("%w: %q is not in rollout %s", trust.ErrHostNotInManifest, h.Hostname, m.RolloutID())
	}
	e := m.HostSet[i]
	if e.WaveIndex != h.WaveIndex {
		return fmt.Errorf("%w: %q is in wave %d of rollout %s, not wave %d", trust.ErrHostNotInManifest, h.Hostname, e.WaveIndex, m.RolloutID(), h.WaveIndex)
	}
	if h.TargetClosure != "" && e.TargetClosure != h.TargetClosure {
		return fmt.Errorf("%w: rollout %s targets %s for %q, not %s", trust.ErrHostNotInManifest, m.RolloutID(), e.TargetClosure, h.Hostname, h.TargetClosure)
	}
	return nil
}
