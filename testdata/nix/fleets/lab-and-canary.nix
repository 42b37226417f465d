# Two channels side by side. lab rolls out all at once: its policy has
# strategy "all-at-once" and no waves, so waves.lab is an empty list, one
# wave holding every lab host, paced by a budget (half the lab at a time)
# and by a host edge inside that wave. prod goes canary first, then the
# rest, and waits for lab to finish (a channel edge). probe-01 has no
# configuration yet: it is in the lab's wave but not built.
{ system }:
let
  host = channel: tags: pubkey: name: {
    system = "x86_64-linux";
    configuration = system name;
    inherit channel tags pubkey;
  };
in
{
  input = {
    hosts = {
      bench-01 = host "lab" [
        "bench"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJl0A92SLR0wfiYUW5G3phPjdknd0Kzgd6XPsfJs07Sv" "bench-01";
      bench-02 = host "lab" [
        "bench"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPB/1yl1rEYKNZHcQuG7DA9PesKI4Stku9PInVDEU5ae" "bench-02";
      bench-03 = host "lab" [
        "bench"
        "gpu"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN1nKcuj7oROgWSlLGcE/7Qw5W/Wh58ZSD/COa8ipBUe" "bench-03";
      scope-01 = host "lab" [
        "scope"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHmdstip66s29W0EzyIuETNe04CvtuOwnEjuSj9u8Psp" "scope-01";
      probe-01 = {
        system = "aarch64-linux";
        channel = "lab";
        tags = [ "bench" ];
      };
      gw-01 = host "prod" [
        "gateway"
        "canary"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPPPlJQAlRqBaQcU0Kq8m/0X4RqpJsIsv7uQbzXbqW74" "gw-01";
      gw-02 = host "prod" [
        "gateway"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKEGNblmO+znyeV/oV0CqMtoIjAXj3gvmymvEYwXVIyO" "gw-02";
      api-01 = host "prod" [
        "api"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMHOFPj7oJyg4IiT0C+MJ1UqbO9b0iZC54yNFNbR1+m4" "api-01";
    };
    channels = {
      lab = {
        rolloutPolicy = "everything-now";
        freshnessWindow = 720;
        signingIntervalMinutes = 120;
        compliance.mode = "disabled";
      };
      prod = {
        rolloutPolicy = "canary-first";
        freshnessWindow = 240;
        compliance.frameworks = [ "iso27001" ];
      };
    };
    rolloutPolicies = {
      # No waves: the whole channel is one wave.
      everything-now = {
        strategy = "all-at-once";
        healthGate.maxFailures = 1;
        onHealthFailure = "rollback-and-halt";
      };
      canary-first = {
        strategy = "canary";
        waves = [
          {
            selector.tags = [ "canary" ];
            soakMinutes = 20;
          }
          {
            selector.all = true;
            soakMinutes = 5;
          }
        ];
        healthGate.systemdFailedUnits.max = 0;
      };
    };
    edges = [
      {
        gates = "scope-01";
        gated = "bench-03";
        reason = "the scope calibrates the GPU bench";
      }
    ];
    channelEdges = [
      {
        gates = "lab";
        gated = "prod";
        reason = "the lab sees every release first";
      }
    ];
    disruptionBudgets = [
      {
        selector.channel = "lab";
        maxInFlightPct = 50;
      }
      {
        selector.tags = [ "gateway" ];
        maxInFlight = 1;
      }
    ];
  };
  warnings = [
    "host \"probe-01\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
  ];
}
