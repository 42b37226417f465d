# Evaluates one of nix/modules with the stub lib and pkgs (stub-lib.nix,
# stub-pkgs.nix) for the given option values, and returns what the tests
# look at:
#
#   nix-instantiate --eval --strict --json nix/tests/modules/eval.nix \
#     --arg module ./nix/modules/agent.nix --arg settings '{ enable = true; … }'
#
# settings are the values of services.<name>.*; config is the rest of
# the NixOS configuration the module reads (networking.hostName; with the
# control plane's postgresql.enable, the names in systemd.services and
# systemd.targets, standing for the units nixpkgs' postgresql module
# defines, which tell its nixpkgs; …). Both may come as JSON instead
# (--argstr settingsJSON …, --argstr configJSON …); a package is then
# { "outPath": "/nix/store/…" }.
{
  module,
  settingsJSON ? null,
  settings ? builtins.fromJSON settingsJSON,
  configJSON ? null,
  config ? if configJSON == null then { } else builtins.fromJSON configJSON,
}:
let
  lib = import ./stub-lib.nix;
  pkgs = import ./stub-pkgs.nix;
  common = import ../../modules/common.nix { inherit lib; };

  m = import module {
    inherit lib pkgs;
    config = full;
  };
  name = builtins.head (builtins.attrNames m.options.services);
  decls = m.options.services.${name};
  # The module's renamed, changed and removed options (its imports).
  moved = lib.applyOptionModules [
    "services"
    name
  ] (m.imports or [ ]) settings;
  values = lib.evalOptions "services.${name}" decls moved.defs;
  full = config // {
    services = (config.services or { }) // {
      ${name} = values;
    };
  };
  out = lib.resolve m.config;
in
{
  inherit name;
  config = out;
  failedAssertions = map (a: a.message) (
    builtins.filter (a: !a.assertion) (moved.assertions ++ out.assertions or [ ])
  );
  warnings = moved.warnings ++ out.warnings or [ ];
  # Options without a type or a description.
  undocumented = lib.undocumented "services.${name}" decls;
  # The files the module writes, as the shared builders make them from
  # these values.
  files = {
    trust = common.trustJSON values.trust;
    # The --config file.
    config = ((pkgs.formats.toml { }).generate "config" (common.daemonSettings.${name} pkgs values)).text;
  }
  // (if values ? probes then { probes = common.probesJSON values; } else { })
  // (if values ? operators then { operators = common.operatorsJSON values.operators; } else { });
}
