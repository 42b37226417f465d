// Package nix holds no Go code of its own: its directory is the Nix side
// of nixfleet (rfcs/0010-nix-integration.md), and its tests check that
// side against the Go one with real Nix (Debian's nix-bin is enough; no
// nixpkgs, no network):
//
//  1. every .nix file of the repository parses;
//  2. mkFleet (nix/lib) evaluates each fleet of testdata/nix/fleets to its
//     golden fleet.resolved.json, with nix-instantiate and with nix eval,
//     and the Go side accepts the result: strict decoding, selectors
//     resolved by Go to the same waves, validation with the same warnings,
//     signing and projection (release.Sign);
//  3. each fleet of testdata/nix/invalid fails evaluation with every
//     expected problem in one error, and manifest.ValidateFleet reports
//     the same problems for the same document;
//  4. the NixOS modules (nix/modules), evaluated against a stub of
//     nixpkgs' lib, start the real binaries with flags they define, and
//     write trust, probes and operators files the Go parsers accept;
//  5. the flake's outputs evaluate against a stub nixpkgs, and its
//     vendorHash is the NAR hash of `go mod vendor`;
//  6. nix/ci-release.sh evaluates, builds, fills closureHash, signs and
//     commits a release that `nixfleet verify` accepts.
//
// The tests fail, never skip, when Nix is missing. Golden files are
// rewritten only with -update.
package nix
