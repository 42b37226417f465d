# A stand-in for a NixOS system (what nixpkgs.lib.nixosSystem returns) in
# tests that have no nixpkgs: config.system.build.toplevel is a tiny
# derivation, built by /bin/sh alone and named like a NixOS toplevel.
# mkFleet reads nothing else of a configuration.
name: {
  config.system.build.toplevel = derivation {
    name = "nixos-system-${name}";
    system = builtins.currentSystem or "x86_64-linux";
    builder = "/bin/sh";
    args = [
      "-c"
      "echo ${name} > $out"
    ];
  };
}
