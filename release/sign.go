package release

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// File names inside a release directory.
const (
	FleetFile   = "fleet.resolved.json"
	RolloutsDir = "rollouts"
	SigSuffix   = ".sig"
)

// ErrSigner is wrapped when the signer fails or returns something that is
// not a signature the expected key accepts.
var ErrSigner = errors.New("release: signer failed")

// Options configure Sign.
type Options struct {
	// Signer signs every artifact.
	Signer trust.Signer
	// PublicKey, when set, must verify every signature Sign produces; Sign
	// then also runs the full verification pipeline on each artifact at
	// Now. A local key's own public key is used when this is nil.
	PublicKey *trust.PublicKey
	// Commit is stamped as meta.ciCommit and becomes every rollout's
	// channelRef.
	Commit string
	// Now is stamped as meta.signedAt (to the second, UTC).
	Now time.Time
}

// Artifact is one signed file of a release.
type Artifact struct {
	// Path is relative to the release directory, with forward slashes.
	Path string
	// Body is the canonical bytes; Sig the raw signature over them.
	Body, Sig []byte
}

// Bundle is a signed release, ready to be written.
type Bundle struct {
	// Fleet is the signed fleet.resolved; Rollouts the manifests, by
	// channel name.
	Fleet    Artifact
	Rollouts []Artifact
	// FleetResolvedHash is the SHA-256 of Fleet.Body.
	FleetResolvedHash string
	// RolloutIDs, in the order of Rollouts.
	RolloutIDs []string
	// Warnings from fleet validation.
	Warnings []string
}

// Artifacts returns every artifact of the bundle.
func (b *Bundle) Artifacts() []Artifact { return append([]Artifact{b.Fleet}, b.Rollouts...) }

// Sign turns an unsigned fleet.resolved into a signed release:
//
//  1. the input is decoded strictly (errors wrap trust.ErrMalformed);
//  2. meta.signedAt, meta.ciCommit and meta.signatureAlgorithm are stamped
//     into the document, keeping every member it already has, known or not,
//     and the result is canonicalized;
//  3. the stamped fleet is validated (errors wrap manifest.ErrInvalidFleet
//     and list every problem), and a member the format does not define is
//     refused by its path unless it is an extension ("x-…", or in meta);
//  4. the fleet and one manifest per channel are signed, and each signature
//     is checked against the public key when one is known.
func Sign(unsigned []byte, opts Options) (*Bundle, error) {
	if opts.Signer == nil {
		return nil, errors.New("release: no signer")
	}
	if _, err := proto.DecodeFleetResolved(unsigned); err != nil {
		return nil, fmt.Errorf("%w: %w", trust.ErrMalformed, err)
	}
	body, err := stamp(unsigned, opts)
	if err != nil {
		return nil, err
	}
	fleet, err := proto.DecodeFleetResolved(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", trust.ErrMalformed, err)
	}
	warnings, err := manifest.ValidateFleet(fleet)
	if err != nil {
		return nil, err
	}
	// A verifier tolerates members it does not know (a newer producer's);
	// the producer signs only those that say they are extensions (rfcs/0001
	// §1 rule 5): a misspelled one ("tagz") would be signed and then
	// ignored, in silence.
	unknown, err := proto.UnknownMembers(unsigned, proto.KindFleetResolved)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", trust.ErrMalformed, err)
	}
	unknown = slices.DeleteFunc(unknown, extension)
	if len(unknown) > 0 {
		paths := make([]string, 0, 5)
		for _, p := range unknown[:min(len(unknown), 5)] {
			paths = append(paths, strings.Join(p, "."))
		}
		return nil, fmt.Errorf("%w: fleet.resolved has member(s) rfcs/0001 does not define, a misspelling or a newer format: %s",
			trust.ErrMalformed, strings.Join(paths, ", "))
	}
	pub := opts.PublicKey
	if pub == nil {
		if k, ok := opts.Signer.(*trust.PrivateKey); ok {
			pub = k.Public()
		}
	}
	if pub != nil && pub.Algorithm() != opts.Signer.Algorithm() {
		return nil, fmt.Errorf("%w: the signer produces %s signatures but the public key is %s", ErrSigner, opts.Signer.Algorithm(), pub.Algorithm())
	}
	sum := sha256.Sum256(body)
	b := &Bundle{FleetResolvedHash: hex.EncodeToString(sum[:]), Warnings: warnings}
	if b.Fleet, err = signArtifact(FleetFile, body, opts.Signer, pub); err != nil {
		return nil, err
	}
	manifests, err := manifest.Project(fleet, b.FleetResolvedHash)
	if err != nil {
		return nil, err
	}
	for _, m := range manifests {
		mb, err := manifest.Marshal(m)
		if err != nil {
			return nil, err
		}
		a, err := signArtifact(path.Join(RolloutsDir, m.RolloutID()+".json"), mb, opts.Signer, pub)
		if err != nil {
			return nil, err
		}
		b.Rollouts = append(b.Rollouts, a)
		b.RolloutIDs = append(b.RolloutIDs, m.RolloutID())
	}
	if pub != nil {
		if err := selfCheck(b, pub, opts.Now); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// extension reports whether an unknown member (by the names on its path)
// is one a producer may sign: named "x-…", or in meta, which is CI's
// provenance.
func extension(path []string) bool {
	return path[0] == "meta" && len(path) > 1 || strings.HasPrefix(path[len(path)-1], "x-")
}

// stamp sets the signing metadata while keeping every other member.
func stamp(unsigned []byte, opts Options) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(unsigned))
	dec.UseNumber() // numbers pass through as written; JCS normalises them
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %w", trust.ErrMalformed, err)
	}
	meta, ok := doc["meta"].(map[string]any)
	if !ok {
		if doc["meta"] != nil {
			return nil, fmt.Errorf("%w: meta is not an object", trust.ErrMalformed)
		}
		meta = map[string]any{}
		doc["meta"] = meta
	}
	if meta["schemaVersion"] == nil {
		meta["schemaVersion"] = proto.SchemaVersion
	}
	meta["signedAt"] = opts.Now.UTC().Truncate(time.Second).Format(time.RFC3339)
	meta["ciCommit"] = opts.Commit
	meta["signatureAlgorithm"] = opts.Signer.Algorithm()
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return trust.Canonicalize(out)
}

func signArtifact(name string, body []byte, s trust.Signer, pub *trust.PublicKey) (Artifact, error) {
	sig, err := s.Sign(body)
	if err != nil {
		return Artifact{}, fmt.Errorf("%w: signing %s: %w", ErrSigner, name, err)
	}
	if len(sig) != trust.SignatureSize {
		return Artifact{}, fmt.Errorf("%w: signing %s: got %d bytes, want a raw %d-byte signature", ErrSigner, name, len(sig), trust.SignatureSize)
	}
	if pub != nil && !pub.Verify(body, sig) {
		return Artifact{}, fmt.Errorf("%w: signing %s: the signature does not verify with the %s public key", ErrSigner, name, pub.Algorithm())
	}
	return Artifact{Path: name, Body: body, Sig: sig}, nil
}

// selfCheck runs the verifiers' pipeline on the bundle, so a release that
// consumers would refuse (for instance one already stale under a channel's
// window at the stamped time) is never written.
func selfCheck(b *Bundle, pub *trust.PublicKey, now time.Time) error {
	k := pub.Proto()
	roots, err := trust.NewRoots(&proto.TrustFile{SchemaVersion: proto.SchemaVersion, CIReleaseKey: proto.KeySlot{Current: &k}})
	if err != nil {
		return err
	}
	if _, err := trust.Verify(b.Fleet.Body, b.Fleet.Sig, roots, trust.Policy{Kind: proto.KindFleetResolved}, now); err != nil {
		return fmt.Errorf("release: the signed fleet.resolved does not verify: %w", err)
	}
	for i, a := range b.Rollouts {
		exp := manifest.Expect{RolloutID: b.RolloutIDs[i]}
		if _, err := manifest.Verify(a.Body, a.Sig, roots, exp, now); err != nil {
			return fmt.Errorf("release: the signed manifest %s does not verify: %w", a.Path, err)
		}
	}
	return nil
}
