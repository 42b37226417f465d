package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/proto"
)

// SignatureSize is the size of every nixfleet signature: ed25519's 64 bytes,
// or ecdsa-p256's r‖s as two 32-byte big-endian integers.
const SignatureSize = 64

// PublicKey is a parsed, checked public key of a supported algorithm.
type PublicKey struct {
	algorithm string
	raw       []byte
	ed        ed25519.PublicKey
	ec        *ecdsa.PublicKey
}

// ParsePublicKey parses a trust.json key. An algorithm other than "ed25519"
// and "ecdsa-p256" yields ErrUnsupportedAlgorithm; key material that does
// not satisfy the algorithm's rules yields ErrInvalidKey.
//
// ed25519 keys must be canonical encodings of a point of the prime-order
// subgroup other than the identity (rfcs/0002-trust.md); ecdsa-p256 keys
// must be the 64-byte X‖Y of a point on P-256.
func ParsePublicKey(k proto.PublicKey) (*PublicKey, error) {
	raw, err := base64.StdEncoding.Strict().DecodeString(k.Public)
	switch k.Algorithm {
	case proto.AlgorithmEd25519, proto.AlgorithmECDSAP256:
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedAlgorithm, k.Algorithm)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s public key is not standard base64: %w", ErrInvalidKey, k.Algorithm, err)
	}
	pk := &PublicKey{algorithm: k.Algorithm, raw: raw}
	switch k.Algorithm {
	case proto.AlgorithmEd25519:
		if len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: ed25519 public key is %d bytes, want %d", ErrInvalidKey, len(raw), ed25519.PublicKeySize)
		}
		if err := checkEd25519PublicKey(raw); err != nil {
			return nil, fmt.Errorf("%w: ed25519 public key: %w", ErrInvalidKey, err)
		}
		pk.ed = ed25519.PublicKey(raw)
	case proto.AlgorithmECDSAP256:
		if len(raw) != 64 {
			return nil, fmt.Errorf("%w: ecdsa-p256 public key is %d bytes, want the 64-byte X‖Y", ErrInvalidKey, len(raw))
		}
		ec, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append([]byte{4}, raw...))
		if err != nil {
			return nil, fmt.Errorf("%w: ecdsa-p256 public key: %w", ErrInvalidKey, err)
		}
		pk.ec = ec
	}
	return pk, nil
}

// Algorithm returns the key's algorithm name.
func (k *PublicKey) Algorithm() string { return k.algorithm }

// Proto returns the key in trust.json form.
func (k *PublicKey) Proto() proto.PublicKey {
	return proto.PublicKey{Algorithm: k.algorithm, Public: base64.StdEncoding.EncodeToString(k.raw)}
}

// same reports whether k and o are one key (false when either is nil).
func (k *PublicKey) same(o *PublicKey) bool {
	return k != nil && o != nil && k.algorithm == o.algorithm && bytes.Equal(k.raw, o.raw)
}

// Verify reports whether sig is a valid signature of message under k.
//
// ed25519: crypto/ed25519 (RFC 8032 cofactorless equation, S < L required,
// R compared by its canonical encoding). ecdsa-p256: SHA-256 of message,
// sig = r‖s, 0 < r,s < n; a high s is normalised to n-s first, so both
// forms of one signature are accepted.
func (k *PublicKey) Verify(message, sig []byte) bool {
	if len(sig) != SignatureSize {
		return false
	}
	switch k.algorithm {
	case proto.AlgorithmEd25519:
		return ed25519.Verify(k.ed, message, sig)
	case proto.AlgorithmECDSAP256:
		n := elliptic.P256().Params().N
		r := new(big.Int).SetBytes(sig[:32])
		s := new(big.Int).SetBytes(sig[32:])
		if r.Sign() == 0 || s.Sign() == 0 || r.Cmp(n) >= 0 || s.Cmp(n) >= 0 {
			return false
		}
		lowS(s)
		h := sha256.Sum256(message)
		return ecdsa.Verify(k.ec, h[:], r, s)
	}
	return false
}

// lowS replaces s by n-s when s > n/2.
func lowS(s *big.Int) {
	n := elliptic.P256().Params().N
	if s.Cmp(new(big.Int).Rsh(n, 1)) > 0 {
		s.Sub(n, s)
	}
}

// Signer produces nixfleet signatures: 64 raw bytes over the message (the
// canonical bytes of an artifact).
type Signer interface {
	// Algorithm is the algorithm of the signatures, which must match the
	// trusted key that will verify them.
	Algorithm() string
	// Sign signs message.
	Sign(message []byte) ([]byte, error)
}

// PrivateKey is a local signing key.
type PrivateKey struct {
	algorithm string
	ed        ed25519.PrivateKey
	ec        *ecdsa.PrivateKey
}

// GenerateKey creates a new key of the given algorithm.
func GenerateKey(algorithm string) (*PrivateKey, error) {
	switch algorithm {
	case proto.AlgorithmEd25519:
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		return &PrivateKey{algorithm: algorithm, ed: priv}, nil
	case proto.AlgorithmECDSAP256:
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		return &PrivateKey{algorithm: algorithm, ec: priv}, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupportedAlgorithm, algorithm)
}

// NewEd25519Key wraps an ed25519 private key.
func NewEd25519Key(priv ed25519.PrivateKey) *PrivateKey {
	return &PrivateKey{algorithm: proto.AlgorithmEd25519, ed: priv}
}

// ParsePrivateKey reads a private key from PEM: PKCS#8 ("PRIVATE KEY", as
// `openssl genpkey` writes it), SEC 1 ("EC PRIVATE KEY") or OpenSSH
// ("OPENSSH PRIVATE KEY", as ssh-keygen writes it). Supported keys are
// ed25519 and ECDSA on P-256; encrypted keys are refused.
func ParsePrivateKey(data []byte) (*PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block found (expected a PKCS#8 or OpenSSH private key)", ErrInvalidKey)
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "OPENSSH PRIVATE KEY":
		key, err = ssh.ParseRawPrivateKey(pem.EncodeToMemory(block))
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, fmt.Errorf("%w: the OpenSSH key is passphrase-protected; use an unencrypted key or an external signer", ErrInvalidKey)
		}
	case "ENCRYPTED PRIVATE KEY":
		return nil, fmt.Errorf("%w: encrypted PKCS#8 keys are not supported; use an unencrypted key or an external signer", ErrInvalidKey)
	default:
		return nil, fmt.Errorf("%w: unsupported PEM block %q", ErrInvalidKey, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	switch k := key.(type) {
	case ed25519.PrivateKey:
		return NewEd25519Key(k), nil
	case *ed25519.PrivateKey:
		return NewEd25519Key(*k), nil
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("%w: ECDSA key on %s; only P-256 is supported", ErrInvalidKey, k.Curve.Params().Name)
		}
		return &PrivateKey{algorithm: proto.AlgorithmECDSAP256, ec: k}, nil
	}
	return nil, fmt.Errorf("%w: %T keys are not supported (use ed25519 or ECDSA P-256)", ErrInvalidKey, key)
}

// Algorithm returns the key's algorithm name.
func (k *PrivateKey) Algorithm() string { return k.algorithm }

// Public returns the matching public key.
func (k *PrivateKey) Public() *PublicKey {
	switch k.algorithm {
	case proto.AlgorithmEd25519:
		pub := k.ed.Public().(ed25519.PublicKey)
		return &PublicKey{algorithm: k.algorithm, raw: []byte(pub), ed: pub}
	default:
		raw, _ := k.ec.PublicKey.Bytes() // 0x04‖X‖Y on a valid P-256 key
		return &PublicKey{algorithm: k.algorithm, raw: raw[1:], ec: &k.ec.PublicKey}
	}
}

// Sign signs message. ecdsa-p256 signatures are SHA-256, r‖s, low-S.
func (k *PrivateKey) Sign(message []byte) ([]byte, error) {
	switch k.algorithm {
	case proto.AlgorithmEd25519:
		return ed25519.Sign(k.ed, message), nil
	default:
		h := sha256.Sum256(message)
		r, s, err := ecdsa.Sign(rand.Reader, k.ec, h[:])
		if err != nil {
			return nil, err
		}
		lowS(s)
		sig := make([]byte, SignatureSize)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
		return sig, nil
	}
}

// MarshalPKCS8PEM encodes the key as an unencrypted PKCS#8 PEM block, the
// format `openssl genpkey` writes.
func (k *PrivateKey) MarshalPKCS8PEM() ([]byte, error) {
	var key any = k.ed
	if k.algorithm == proto.AlgorithmECDSAP256 {
		key = k.ec
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseSSHEd25519 decodes an OpenSSH authorized-key line of type
// ssh-ed25519 ("ssh-ed25519 <base64> [comment]"), the form of a host's
// pubkey in fleet.resolved and of its SSH host key.
func ParseSSHEd25519(line string) (ed25519.PublicKey, error) {
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != "ssh-ed25519" {
		return nil, fmt.Errorf("%w: %q is not an \"ssh-ed25519 <base64>\" key", ErrInvalidKey, line)
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return nil, fmt.Errorf("%w: ssh key data is not base64: %w", ErrInvalidKey, err)
	}
	// The blob is string("ssh-ed25519") string(32-byte key), each with a
	// 4-byte big-endian length.
	var parts [][]byte
	for len(blob) > 0 {
		if len(blob) < 4 {
			return nil, fmt.Errorf("%w: ssh key data is not an ssh-ed25519 public key", ErrInvalidKey)
		}
		n := binary.BigEndian.Uint32(blob)
		if uint64(len(blob)-4) < uint64(n) {
			return nil, fmt.Errorf("%w: ssh key data is not an ssh-ed25519 public key", ErrInvalidKey)
		}
		parts, blob = append(parts, blob[4:4+n]), blob[4+n:]
	}
	if len(parts) != 2 || string(parts[0]) != "ssh-ed25519" || len(parts[1]) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: ssh key data is not an ssh-ed25519 public key", ErrInvalidKey)
	}
	return ed25519.PublicKey(parts[1]), nil
}

// SSHEd25519Line encodes an ed25519 public key as an OpenSSH
// authorized-key line, the inverse of ParseSSHEd25519.
func SSHEd25519Line(pub ed25519.PublicKey) string {
	var blob []byte
	for _, part := range [][]byte{[]byte("ssh-ed25519"), pub} {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(part)))
		blob = append(blob, part...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob)
}
