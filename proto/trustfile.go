package proto

// TrustFile is trust.json: the keys a control plane or an agent accepts.
// It is local configuration, never a signed artifact.
type TrustFile struct {
	// SchemaVersion must be 1.
	SchemaVersion int `json:"schemaVersion"`
	// CIReleaseKey is the key slot for artifacts signed by CI.
	CIReleaseKey KeySlot `json:"ciReleaseKey"`
	// CacheKeys are Nix binary-cache public keys in Nix's own
	// "name:base64" form, handed to Nix as trusted-public-keys.
	CacheKeys []string `json:"cacheKeys"`
}

// KeySlot holds one signing role's keys and their rotation schedule.
//
// Which keys are active at time t, and the meaning of RetireAt and
// RejectBefore, are defined by trust.Roots (rfcs/0002-trust.md).
type KeySlot struct {
	// Current is the key CI signs with now. Null when unset.
	Current *PublicKey `json:"current"`
	// Previous is the key CI signed with before the last rotation.
	Previous *PublicKey `json:"previous"`
	// Successor is the key CI will sign with after the next rotation.
	Successor *PublicKey `json:"successor"`
	// RetireAt (RFC 3339) is when Current stops being accepted; it needs a
	// Successor.
	RetireAt *string `json:"retireAt"`
	// RejectBefore (RFC 3339) refuses every artifact signed earlier, with
	// any key: the switch to pull after a key compromise.
	RejectBefore *string `json:"rejectBefore"`
}

// PublicKey is a trusted public key. The algorithm belongs to the key, never
// to the artifact it verifies.
type PublicKey struct {
	// Algorithm is "ed25519" or "ecdsa-p256". Other values are kept and
	// reported as unsupported by verifiers.
	Algorithm string `json:"algorithm"`
	// Public is standard base64 (with padding) of the raw key: 32 bytes for
	// ed25519, the 64-byte X‖Y point for ecdsa-p256.
	Public string `json:"public"`
}
