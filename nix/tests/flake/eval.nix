# Evaluates the flake's outputs (flake.nix) against a stub nixpkgs, for
# what can be seen without one: the packages' buildGoModule arguments
# (vendorHash, subPackages), the apps, the modules' wrappers, lib.mkFleet
# and the names of the checks. The stub builders return their arguments.
#
#   nix-instantiate --eval --strict --json nix/tests/flake/eval.nix
let
  flake = import ../../../flake.nix;
  systems = [
    "x86_64-linux"
    "aarch64-linux"
  ];
  fake = name: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/${builtins.substring 0 32 (builtins.hashString "sha256" name)}-${name}";
  };
  stubPkgs = system: {
    buildGoModule = args: fake args.pname // { inherit args; };
    writeShellApplication = args: fake args.name // { inherit args; };
    runCommand = name: _: _: fake name;
    git = fake "git";
    coreutils = fake "coreutils";
    gnugrep = fake "gnugrep";
    installShellFiles = fake "installShellFiles";
    stdenv.hostPlatform.system = system;
    stdenv.buildPlatform.canExecute = _: true;
  };
  nixpkgs = {
    legacyPackages = builtins.listToAttrs (
      map (s: {
        name = s;
        value = stubPkgs s;
      }) systems
    );
    lib = {
      cleanSource = src: src;
      optionalString = cond: s: if cond then s else "";
      mkDefault = content: {
        _type = "override";
        priority = 1000;
        inherit content;
      };
      nixosSystem = _: throw "the stub nixpkgs has no NixOS";
    };
  };
  outputs = flake.outputs {
    self = outputs // {
      outPath = toString ../../..;
    };
    inherit nixpkgs;
  };
  module =
    name: system:
    let
      m = outputs.nixosModules.${name} {
        inherit (nixpkgs) lib;
        pkgs = stubPkgs system;
      };
    in
    {
      imports = map toString m.imports;
      services = builtins.mapAttrs (_: s: { package = s.package.content.name; }) m.services;
    };
in
{
  inherit (flake) description;
  nixpkgsInput = flake.inputs.nixpkgs.url;
  packages = builtins.mapAttrs (
    _: ps:
    builtins.mapAttrs (_: p: {
      inherit (p) name;
      # src as a string: a path would be copied into the store.
      args =
        builtins.removeAttrs p.args [ "src" ]
        // (if p.args ? src then { src = toString p.args.src; } else { });
    }) ps
  ) outputs.packages;
  apps = outputs.apps;
  modules = {
    agent = module "agent" "aarch64-linux";
    control-plane = module "control-plane" "x86_64-linux";
    default = map builtins.typeOf outputs.nixosModules.default.imports;
  };
  checks = builtins.mapAttrs (_: builtins.attrNames) outputs.checks;
  libMkFleet =
    (outputs.lib.mkFleet {
      hosts.h = {
        system = "x86_64-linux";
        channel = "c";
      };
      channels.c = {
        rolloutPolicy = "p";
        freshnessWindow = 120;
      };
      rolloutPolicies.p.waves = [ { selector.all = true; } ];
    }).resolved.waves;
}
