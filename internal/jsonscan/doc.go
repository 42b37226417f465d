// Package jsonscan is the strict, single-pass JSON checker that every
// nixfleet decoder and the JCS canonicalizer run before they trust a byte.
//
// Scan walks the input once, without building a tree, and:
//
//  1. enforces the RFC 8259 grammar exactly (no comments, no leading "+",
//     no leading zeros, no hexadecimal, no NaN or Infinity literals);
//  2. rejects invalid UTF-8, raw control characters in strings, and UTF-16
//     escapes that leave a surrogate unpaired;
//  3. rejects numbers whose magnitude overflows an IEEE 754 double;
//  4. rejects duplicate member names, compared after unescaping, so "a" and
//     "\u0061" are the same name;
//  5. rejects nesting deeper than the caller's limit and any data after the
//     top-level value.
//
// As a by-product it reports whether the input is already in the canonical
// form of RFC 8785 (JCS). That answer is conservative: true means the bytes
// are exactly their own JCS serialization; false means "not known", for
// example for any number other than a short integer. Callers use it to skip
// re-serialising artifacts that CI already wrote canonically.
//
// The package uses the standard library only, so proto/ can depend on it.
package jsonscan
