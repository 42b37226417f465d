# testdata/fleets/two-channels.json declared with mkFleet: same hosts,
# channels, policies, edges and budgets. Its waves are resolved per channel
# (each host in the first wave that takes it), where the JSON sample lists
# hosts of every channel; both project to the same rollout manifests (the
# Go test checks it).
{ system }:
let
  host = name: channel: tags: pubkey: {
    system = if name == "edge-02" then "aarch64-linux" else "x86_64-linux";
    configuration = system name;
    inherit channel tags pubkey;
  };
in
{
  input = {
    hosts = {
      canary-01 = host "canary-01" "stable" [
        "canary"
        "web"
      ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIErcRFfSOKgAXPymcx6pk1zCVMOuNHVBadh+EDfRaxn2";
      web-01 = host "web-01" "stable" [ "web" ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOG05ZB5CE/OQnGpVhTmUsL0uCOxInm+oVr+q2u3wtrS";
      web-02 = host "web-02" "stable" [ "web" ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP6DtG5xFGyynlnOEqprmKlsTD07wjrf5nnMAAfsSyqd";
      db-01 = host "db-01" "stable" [ "db" ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGBFOnQGcTjr7cNLddKo6WAIie9xvUl+N/U3BLY99T4l";
      edge-01 = host "edge-01" "edge" [ "lab" ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF5bWms/brMjAihyAcmSs1hI8D3zCIIOV75NerK8fIUl";
      edge-02 = host "edge-02" "edge" [ "lab" ] "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICIo81mkiHuO2wQC1Gkt2vS473b9KGuMff+LOWeYOUA7";
    };
    channels = {
      edge = {
        rolloutPolicy = "all-at-once";
        freshnessWindow = 1440;
        signingIntervalMinutes = 60;
        reconcileIntervalMinutes = 5;
        compliance.mode = "disabled";
      };
      stable = {
        rolloutPolicy = "canary-then-web-then-rest";
        freshnessWindow = 180;
        compliance = {
          frameworks = [ "nis2" ];
          mode = "permissive";
        };
      };
    };
    rolloutPolicies = {
      all-at-once = {
        strategy = "all-at-once";
        waves = [ { selector.all = true; } ];
      };
      canary-then-web-then-rest = {
        strategy = "canary";
        waves = [
          {
            selector.tags = [ "canary" ];
            soakMinutes = 15;
          }
          {
            selector.tags = [ "web" ];
            soakMinutes = 10;
          }
          { selector.all = true; }
        ];
        healthGate = {
          systemdFailedUnits.max = 0;
          maxFailures = 1;
        };
        onHealthFailure = "rollback-and-halt";
      };
    };
    edges = [
      {
        gates = "web-01";
        gated = "web-02";
        reason = "web-02 takes over when web-01 reboots";
      }
    ];
    channelEdges = [
      {
        gates = "edge";
        gated = "stable";
        reason = "edge proves a release first";
      }
    ];
    disruptionBudgets = [
      {
        selector.tags = [ "web" ];
        maxInFlight = 1;
      }
      {
        selector.all = true;
        maxInFlightPct = 50;
      }
    ];
  };
}
