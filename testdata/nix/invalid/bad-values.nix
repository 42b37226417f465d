# Names, keys and enumerations the Go side refuses, all in one fleet: one
# evaluation reports every problem.
{ system }:
let
  c = import ../common.nix { inherit system; };
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      "bad host" = c.host "stable" [ ] "bad-host";
      k = c.host "stable" [ ] "k" // {
        pubkey = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ";
      };
    };
    channels = c.fleet.channels // {
      "release.lock" = {
        rolloutPolicy = "all";
        freshnessWindow = 180;
        compliance.mode = "strict";
      };
    };
    rolloutPolicies.all = {
      waves = [
        {
          selector.all = true;
          soakMinutes = -5;
        }
      ];
      healthGate = {
        maxFailures = -1;
        systemdFailedUnits.max = -2;
      };
      onHealthFailure = "panic";
    };
  };
  errors = [
    "host \"bad host\": name must be letters, digits, '.', '_' or '-'"
    "host \"k\": pubkey: \"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ\" is not an OpenSSH ssh-ed25519 public key"
    "channel \"release.lock\": name must be letters, digits, '_', '-' and single inner dots (it becomes a git ref)"
    "channel \"release.lock\": compliance.mode \"strict\" is not disabled, permissive or enforce"
    "rollout policy \"all\": onHealthFailure \"panic\" is not halt or rollback-and-halt"
    "rollout policy \"all\" wave 0: soakMinutes -5 is negative"
    "rollout policy \"all\": healthGate.maxFailures -1 is negative"
    "rollout policy \"all\": healthGate.systemdFailedUnits.max -2 is negative"
    "waves.edge[0]: soakMinutes -5 is negative"
    "waves.release.lock[0]: soakMinutes -5 is negative"
    "waves.stable[0]: soakMinutes -5 is negative"
  ];
}
