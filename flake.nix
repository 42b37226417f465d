{
  description = "nixfleet: a GitOps rollout engine for NixOS fleets";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems =
        f:
        builtins.listToAttrs (
          map (system: {
            name = system;
            value = f system nixpkgs.legacyPackages.${system};
          }) systems
        );

      version = self.shortRev or self.dirtyShortRev or "dev";

      # The NAR hash of the vendor directory `go mod vendor` writes for
      # go.mod and go.sum: what buildGoModule's goModules derivation
      # produces. After a dependency change, recompute it with
      #
      #   go mod vendor -o /tmp/vendor && nix hash path /tmp/vendor
      #
      # (or set it to lib.fakeHash, build, and take the hash Nix reports).
      # `go test ./nix` fails while it is stale (TestFlakeVendorHash); it
      # was computed with Go 1.26 and is not checked against a nixpkgs
      # build in this repository's CI, which has no nixpkgs.
      vendorHash = "sha256-6Fkd0gENtbCb+kjquXM4DxSmuleN+Zgui440umnHcKY=";

      # One package per command: the agent's closure need not carry the
      # control plane.
      command =
        pkgs: name: description:
        # go.mod asks for Go 1.26.
        (pkgs.buildGo126Module or pkgs.buildGoModule) {
          pname = name;
          inherit version vendorHash;
          src = nixpkgs.lib.cleanSource ./.;
          subPackages = [ "cmd/${name}" ];
          env.CGO_ENABLED = "0";
          ldflags = [
            "-s"
            "-w"
          ];
          # The Go tests need root, Nix, PostgreSQL and the network
          # namespaces of .ci/run; the flake's checks run the Nix side.
          doCheck = false;
          # The manual page, from the command itself (`man`): nixfleet(1),
          # nixfleet-cp(8), nixfleet-agent(8). A cross build cannot run it.
          nativeBuildInputs = [ pkgs.installShellFiles ];
          postInstall =
            let
              page = "${name}.${if name == "nixfleet" then "1" else "8"}";
            in
            nixpkgs.lib.optionalString (pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform) ''
              $out/bin/${name} man > ${page}
              installManPage ${page}
            '';
          meta = {
            inherit description;
            mainProgram = name;
            platforms = systems;
          };
        };

      # The whole release step of CI (nix/ci-release.sh).
      ciRelease =
        pkgs: nixfleet:
        pkgs.writeShellApplication {
          name = "nixfleet-ci-release";
          runtimeInputs = [
            nixfleet
            pkgs.git
            pkgs.coreutils
            pkgs.gnugrep
          ];
          text = builtins.readFile ./nix/ci-release.sh;
        };

      # The modules, with the package of the machine's platform.
      withPackage =
        file: service: package:
        { lib, pkgs, ... }:
        {
          imports = [ file ];
          services.${service}.package = lib.mkDefault self.packages.${pkgs.stdenv.hostPlatform.system}.${package};
        };
    in
    {
      # mkFleet and the rest of the Nix library: builtins only, so
      # `(import ./nix/lib).mkFleet` works without the flake too.
      lib = import ./nix/lib;

      nixosModules = {
        agent = withPackage ./nix/modules/agent.nix "nixfleet-agent" "nixfleet-agent";
        control-plane = withPackage ./nix/modules/control-plane.nix "nixfleet-control-plane" "nixfleet-cp";
        default = {
          imports = [
            self.nixosModules.agent
            self.nixosModules.control-plane
          ];
        };
      };

      packages = forAllSystems (
        system: pkgs: rec {
          nixfleet = command pkgs "nixfleet" "nixfleet operator and CI command line";
          nixfleet-cp = command pkgs "nixfleet-cp" "nixfleet control plane";
          nixfleet-agent = command pkgs "nixfleet-agent" "nixfleet agent";
          ci-release = ciRelease pkgs nixfleet;
          default = nixfleet;
        }
      );

      apps = forAllSystems (
        system: _: rec {
          nixfleet = {
            type = "app";
            program = "${self.packages.${system}.nixfleet}/bin/nixfleet";
          };
          ci-release = {
            type = "app";
            program = "${self.packages.${system}.ci-release}/bin/nixfleet-ci-release";
          };
          default = nixfleet;
        }
      );

      checks = forAllSystems (
        system: pkgs:
        let
          tests = import ./nix/tests;
          # A machine running both services, evaluated with nixpkgs'
          # module system: types, assertions and the generated units.
          machine = nixpkgs.lib.nixosSystem {
            inherit system;
            modules = [
              self.nixosModules.default
              {
                boot.loader.grub.enable = false;
                fileSystems."/".device = "/dev/null";
                system.stateVersion = "25.05";
                networking.hostName = "web-01";
                services.openssh.enable = true;
                services.nixfleet-agent = {
                  enable = true;
                  settings.cp = "https://fleet.example.org:8443";
                  settings.substituter = [ "https://cache.example.org" ];
                  trust.ciReleaseKey.current.public = "2Y3nl2cZk8T1m0a8B0yN0x3v6zJj6h3cX8f5oKq7b0Q=";
                  probes = [
                    {
                      name = "ssh";
                      type = "tcp";
                      address = "127.0.0.1:22";
                    }
                  ];
                };
                services.nixfleet-control-plane = {
                  enable = true;
                  settings.listen = "0.0.0.0:8443";
                  repository = "/srv/git/fleet.git";
                  trust.ciReleaseKey.current.public = "2Y3nl2cZk8T1m0a8B0yN0x3v6zJj6h3cX8f5oKq7b0Q=";
                  tls.certFile = "/var/lib/nixfleet-cp/cert.pem";
                  tls.keyFile = "/var/lib/nixfleet-cp/key.pem";
                  postgresql.enable = true;
                  operators = [
                    {
                      name = "alice";
                      key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOG05ZB5CE/OQnGpVhTmUsL0uCOxInm+oVr+q2u3wtrS";
                      role = "operator";
                    }
                  ];
                };
              }
            ];
          };
          units = machine.config.systemd.units;
        in
        {
          # Every mkFleet case of testdata/nix and nix/tests (nix/tests).
          mkfleet =
            if tests.failures == [ ] then
              pkgs.runCommand "nixfleet-mkfleet-tests" { } ''
                echo "${toString tests.count} mkFleet cases passed" > $out
              ''
            else
              throw ("mkFleet tests failed:\n" + builtins.concatStringsSep "\n" tests.failures);
          # The modules with nixpkgs: the whole system evaluates (so every
          # assertion holds) and the two units are written.
          modules = pkgs.runCommand "nixfleet-modules" { } ''
            mkdir $out
            echo ${builtins.unsafeDiscardStringContext machine.config.system.build.toplevel.drvPath} > $out/toplevel.drv
            cp ${units."nixfleet-agent.service".unit}/nixfleet-agent.service $out/
            cp ${units."nixfleet-control-plane.service".unit}/nixfleet-control-plane.service $out/
          '';
          inherit (self.packages.${system})
            nixfleet
            nixfleet-cp
            nixfleet-agent
            ci-release
            ;
        }
      );
    };
}
