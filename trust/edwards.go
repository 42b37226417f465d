package trust

import (
	"errors"
	"math/big"
)

// This file checks that an ed25519 public key is one an honest key holder
// could have: a canonical encoding of a point in the prime-order subgroup,
// other than the identity. crypto/ed25519 accepts non-canonical encodings
// and points of small or mixed order, which let one signature verify for
// several messages or differently across implementations. Keys are checked
// once, when trust roots are loaded, so plain math/big is fast enough
// (a few milliseconds) and keeps the code auditable.

var (
	edP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	// edD = -121665/121666 mod p.
	edD = func() *big.Int {
		inv := new(big.Int).ModInverse(big.NewInt(121666), edP)
		d := new(big.Int).Mul(big.NewInt(-121665), inv)
		return d.Mod(d, edP)
	}()
	// edL is the order of the prime-order subgroup, 2^252 + 27742317777372353535851937790883648493.
	edL = func() *big.Int {
		l, _ := new(big.Int).SetString("27742317777372353535851937790883648493", 10)
		return l.Add(l, new(big.Int).Lsh(big.NewInt(1), 252))
	}()
)

type edPoint struct{ x, y *big.Int }

func edIdentity() edPoint { return edPoint{big.NewInt(0), big.NewInt(1)} }

func (p edPoint) isIdentity() bool { return p.x.Sign() == 0 && p.y.Cmp(big.NewInt(1)) == 0 }

// edDecode decodes a 32-byte point encoding per RFC 8032 §5.1.3, refusing
// the non-canonical encodings that section allows implementations to
// accept (y >= p, or x = 0 with the sign bit set).
func edDecode(b []byte) (edPoint, error) {
	if len(b) != 32 {
		return edPoint{}, errors.New("point encoding is not 32 bytes")
	}
	le := make([]byte, 32)
	for i := range 32 {
		le[31-i] = b[i]
	}
	sign := le[0] >> 7
	le[0] &= 0x7f
	y := new(big.Int).SetBytes(le)
	if y.Cmp(edP) >= 0 {
		return edPoint{}, errors.New("non-canonical point encoding")
	}
	y2 := new(big.Int).Mul(y, y)
	u := new(big.Int).Sub(y2, big.NewInt(1))
	u.Mod(u, edP)
	v := new(big.Int).Mul(edD, y2)
	v.Add(v, big.NewInt(1)).Mod(v, edP)
	x2 := new(big.Int).Mul(u, new(big.Int).ModInverse(v, edP))
	x2.Mod(x2, edP)
	x := new(big.Int).ModSqrt(x2, edP)
	if x == nil {
		return edPoint{}, errors.New("not a point on the curve")
	}
	if x.Sign() == 0 && sign == 1 {
		return edPoint{}, errors.New("non-canonical point encoding")
	}
	if uint8(x.Bit(0)) != sign {
		x.Sub(edP, x)
	}
	return edPoint{x, y}, nil
}

// edEncode is the inverse of edDecode.
func edEncode(p edPoint) []byte {
	be := p.y.FillBytes(make([]byte, 32))
	out := make([]byte, 32)
	for i := range 32 {
		out[i] = be[31-i]
	}
	out[31] |= byte(p.x.Bit(0)) << 7
	return out
}

// edAdd adds two points with the complete twisted Edwards formulas (a = -1).
func edAdd(p, q edPoint) edPoint {
	x1y2 := new(big.Int).Mul(p.x, q.y)
	y1x2 := new(big.Int).Mul(p.y, q.x)
	x1x2 := new(big.Int).Mul(p.x, q.x)
	y1y2 := new(big.Int).Mul(p.y, q.y)
	t := new(big.Int).Mul(edD, x1x2)
	t.Mul(t, y1y2).Mod(t, edP)

	xn := new(big.Int).Add(x1y2, y1x2)
	xd := new(big.Int).Add(big.NewInt(1), t)
	yn := new(big.Int).Add(y1y2, x1x2)
	yd := new(big.Int).Sub(big.NewInt(1), t)
	yd.Mod(yd, edP)

	x := xn.Mul(xn, new(big.Int).ModInverse(xd, edP))
	y := yn.Mul(yn, new(big.Int).ModInverse(yd, edP))
	return edPoint{x.Mod(x, edP), y.Mod(y, edP)}
}

func edScalarMult(k *big.Int, p edPoint) edPoint {
	r := edIdentity()
	for i := k.BitLen() - 1; i >= 0; i-- {
		r = edAdd(r, r)
		if k.Bit(i) == 1 {
			r = edAdd(r, p)
		}
	}
	return r
}

// checkEd25519PublicKey enforces nixfleet's ed25519 key rule (rfcs/0002).
func checkEd25519PublicKey(b []byte) error {
	p, err := edDecode(b)
	if err != nil {
		return err
	}
	if p.isIdentity() {
		return errors.New("key is the identity point")
	}
	if !edScalarMult(edL, p).isIdentity() {
		return errors.New("key is not in the prime-order subgroup (small or mixed order)")
	}
	return nil
}
