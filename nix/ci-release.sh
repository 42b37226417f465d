#!/usr/bin/env bash
# ci-release: CI's whole release step for a fleet declared with mkFleet
# (rfcs/0010 §4). From the root of the fleet repository:
#
#   1. evaluate the fleet: fleet.resolved with every host's closureHash
#      filled from its configuration's toplevel (mkFleet throws every
#      problem at once, and traces its warnings);
#   2. build every host's toplevel (nix-store --realise of the evaluated
#      derivations) and check the outputs are the closures named in 1;
#   3. optionally copy the closures to the binary cache the agents use
#      (--copy-to);
#   4. sign: nixfleet release sign, which validates again, stamps
#      meta.signedAt and meta.ciCommit, projects one rollout manifest per
#      channel and writes releases/ atomically;
#   5. commit releases/ (unless --no-commit). Promoting a channel stays a
#      push of that commit to refs/heads/channels/<channel>.
#
# Needs nix (with `nix-command`, and `flakes` for --flake), git and
# nixfleet. The flake's apps.ci-release wraps this script.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: ci-release [--flake REF | --file FILE [--attr PATH]] (--key FILE | --sign-cmd CMD [--public FILE])
                  [--out DIR] [--commit SHA] [--copy-to STORE] [--no-commit] [--nixfleet PATH]

  --flake REF      flake output holding the mkFleet result (default: .#fleet)
  --file FILE      a Nix file evaluating to the mkFleet result, instead of a flake
  --attr PATH      attribute path of the mkFleet result inside FILE (default: the file itself)
  --key FILE       CI signing key (PKCS#8 or OpenSSH), passed to nixfleet release sign
  --sign-cmd CMD   external signer, passed to nixfleet release sign; --public FILE checks it
  --out DIR        release directory (default: releases)
  --commit SHA     the commit the release is made from (default: git rev-parse HEAD)
  --copy-to STORE  copy the built closures there (nix copy --to), e.g. s3://… or file://…
  --no-commit      write DIR but do not commit it
  --nixfleet PATH  the nixfleet command (default: nixfleet on PATH)
EOF
}

die() {
	printf 'ci-release: %s\n' "$*" >&2
	exit 1
}

flake='' file='' attr='' out=releases commit='' copy_to='' do_commit=1 nixfleet=nixfleet
sign=()
while (($#)); do
	case "$1" in
	--flake | --file | --attr | --key | --sign-cmd | --public | --out | --commit | --copy-to | --nixfleet)
		(($# >= 2)) || die "$1 needs a value"
		case "$1" in
		--flake) flake=$2 ;;
		--file) file=$2 ;;
		--attr) attr=$2 ;;
		--key | --sign-cmd | --public) sign+=("$1" "$2") ;;
		--out) out=$2 ;;
		--commit) commit=$2 ;;
		--copy-to) copy_to=$2 ;;
		--nixfleet) nixfleet=$2 ;;
		esac
		shift 2
		;;
	--no-commit)
		do_commit=0
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		usage >&2
		die "unknown argument $1"
		;;
	esac
done
[ -n "$flake" ] && [ -n "$file" ] && die "give --flake or --file, not both"
[ -n "$attr" ] && [ -z "$file" ] && die "--attr goes with --file"
((${#sign[@]})) || die "give --key or --sign-cmd"
if [ -z "$file" ]; then
	fleet=("${flake:-.#fleet}")
else
	fleet=(-f "$file" "$attr")
fi
if [ -z "$commit" ]; then
	commit=$(git rev-parse HEAD) || die "cannot tell the commit (git rev-parse HEAD); pass --commit"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The document, with the closure of every host that has a
# configuration. Forcing `resolved` validates the fleet.
echo "ci-release: evaluating the fleet" >&2
# shellcheck disable=SC2016 # Nix interpolation, not the shell's
nix eval --json "${fleet[@]}" --apply '
  fleet:
  let
    resolved = fleet.resolved;
    closure = name:
      if fleet.toplevels ? ${name}
      then baseNameOf (builtins.unsafeDiscardStringContext fleet.toplevels.${name}.outPath)
      else null;
  in
  resolved // { hosts = builtins.mapAttrs (name: h: h // { closureHash = closure name; }) resolved.hosts; }
' >"$work/fleet.resolved.json"

# 2. What to build: "<host> <derivation> <output>" per line.
# shellcheck disable=SC2016 # Nix interpolation, not the shell's
nix eval --raw "${fleet[@]}" --apply '
  fleet:
  builtins.concatStringsSep "" (builtins.attrValues (builtins.mapAttrs (name: t:
    "${name} ${builtins.unsafeDiscardStringContext t.drvPath} ${builtins.unsafeDiscardStringContext t.outPath}\n")
    fleet.toplevels))
' >"$work/toplevels"

drvs=() outs=()
while read -r host drv outPath; do
	drvs+=("$drv")
	outs+=("$outPath")
	grep -qF "\"closureHash\":\"$(basename "$outPath")\"" "$work/fleet.resolved.json" ||
		die "host $host: its toplevel $outPath is not the closure the document names"
done <"$work/toplevels"
echo "ci-release: building ${#drvs[@]} host system(s)" >&2
if ((${#drvs[@]})); then
	# GC roots in the work directory hold the closures until the copy.
	nix-store --realise --add-root "$work/gcroots/system" "${drvs[@]}" >/dev/null
	for p in "${outs[@]}"; do
		[ -e "$p" ] || die "$p was not built"
	done
fi

# 3. The closures, where the agents will find them.
if [ -n "$copy_to" ] && ((${#outs[@]})); then
	echo "ci-release: copying the closures to $copy_to" >&2
	nix copy --to "$copy_to" "${outs[@]}"
fi

# 4. Sign (nixfleet validates again and writes $out atomically).
"$nixfleet" release sign --fleet "$work/fleet.resolved.json" "${sign[@]}" --out "$out" --commit "$commit"

# 5. Commit.
if ((do_commit)); then
	git add -A -- "$out"
	git commit -q -m "release: $commit" -- "$out"
	echo "ci-release: committed $out as $(git rev-parse HEAD); promote it by pushing that commit to refs/heads/channels/<channel>" >&2
fi
