# One mkFleet test case (testdata/nix/{fleets,invalid}/<name>.nix): the
# fleet it declares, with what the case expects.
#
#   nix-instantiate --eval --strict --json nix/tests/case.nix \
#     --arg file ./testdata/nix/fleets/minimal.nix -A resolved
#
# A case file is a function of { system } (fake-system.nix) returning
# { input; errors ? [ ]; warnings ? [ ]; }: input is mkFleet's argument,
# errors every problem mkFleet must report (in order), warnings every
# warning.
{ file }:
let
  inherit ((import ../lib)) mkFleet;
  c = import file { system = import ./fake-system.nix; };
  fleet = mkFleet c.input;
in
fleet
// {
  expect = {
    errors = c.errors or [ ];
    warnings = c.warnings or [ ];
  };
  # The hosts CI would build, sorted.
  built = builtins.attrNames fleet.toplevels;
}
