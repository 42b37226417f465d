# Every selector rule and the evaluation-time combinators, the legacy
# spelling of a channel edge, every budget limit, and each warning: a host
# without a configuration, a wave that matches nobody, a budget that admits
# one host at a time across ten or more, a budget without a limit.
{ system }:
let
  host = name: channel: tags: {
    system = "x86_64-linux";
    configuration = system name;
    inherit channel tags;
  };
in
{
  input = {
    hosts = {
      canary-01 = host "canary-01" "prod" [
        "canary"
        "web"
        "eu"
      ];
      web-01 = host "web-01" "prod" [
        "web"
        "eu"
      ];
      web-02 = host "web-02" "prod" [
        "web"
        "eu"
      ];
      web-03 = host "web-03" "prod" [
        "web"
        "us"
      ];
      web-04 = host "web-04" "prod" [
        "web"
        "us"
      ];
      db-01 = host "db-01" "prod" [
        "db"
        "eu"
      ];
      db-02 = host "db-02" "prod" [
        "db"
        "us"
      ];
      cache-01 = host "cache-01" "prod" [
        "cache"
        "us"
      ];
      lb-01 = host "lb-01" "prod" [ "lb" ];
      lb-02 = host "lb-02" "prod" [ "lb" ];
      # Not built by CI: no configuration.
      batch-01 = {
        system = "x86_64-linux";
        channel = "prod";
        tags = [ "batch" ];
      };
      lab-01 = host "lab-01" "lab" [
        "lab"
        "web"
      ];
      lab-02 = host "lab-02" "lab" [ "lab" ] // {
        pin = {
          commit = "0123abc";
          reason = "waiting for a driver fix";
          expiresAt = "2026-12-01T00:00:00Z";
        };
      };
    };
    channels = {
      prod = {
        rolloutPolicy = "staged";
        freshnessWindow = 2880;
        signingIntervalMinutes = 720;
        reconcileIntervalMinutes = 2;
        compliance = {
          frameworks = [
            "nis2"
            "iso27001"
          ];
          mode = "permissive";
        };
      };
      lab = {
        rolloutPolicy = "lab-first";
        freshnessWindow = 120;
        signingIntervalMinutes = 60;
      };
    };
    rolloutPolicies = {
      staged = {
        strategy = "canary";
        waves = [
          {
            selector.tags = [ "canary" ];
            soakMinutes = 30;
          }
          {
            # web hosts in the EU
            selector.and = [
              { tags = [ "web" ]; }
              { tagsAny = [ "eu" ]; }
            ];
            soakMinutes = 20;
          }
          {
            # the other web hosts but web-04
            selector = {
              tags = [ "web" ];
              not.hosts = [ "web-04" ];
            };
            soakMinutes = 10;
          }
          {
            # all of the tags: web-04 (web-03 is taken)
            selector.tags = [
              "web"
              "us"
            ];
            soakMinutes = 10;
          }
          {
            selector.tagsAny = [
              "db"
              "cache"
            ];
            soakMinutes = 5;
          }
          { selector.all = true; }
          # matches nobody (yet): a warning, and an empty wave
          { selector.tags = [ "gpu" ]; }
        ];
        healthGate = {
          systemdFailedUnits.max = 0;
          complianceProbes.required = true;
          maxFailures = 2;
        };
        onHealthFailure = "rollback-and-halt";
      };
      lab-first.waves = [ { selector.channel = "lab"; } ];
    };
    edges = [
      {
        gates = "web-01";
        gated = "web-02";
      }
    ];
    channelEdges = [
      {
        before = "lab";
        after = "prod";
        reason = "lab sees every release first";
      }
    ];
    disruptionBudgets = [
      {
        selector.tags = [ "db" ];
        maxInFlight = 1;
      }
      {
        selector.all = true;
        maxInFlight = 1;
      }
      {
        selector.tagsAny = [
          "web"
          "lb"
        ];
        maxInFlightPct = 25;
      }
      {
        selector.not.tags = [ "db" ];
        maxInFlightPct = 50;
      }
      {
        selector.hosts = [
          "lb-02"
          "lb-01"
        ];
      }
      {
        selector.channel = "lab";
        maxInFlight = 1;
      }
    ];
  };
  warnings = [
    "host \"batch-01\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
    "rollout policy \"staged\" wave 6: selector matches no host"
    "disruptionBudgets[1]: admits one host at a time across 13 hosts; rollouts through it will be slow"
    "disruptionBudgets[4]: sets neither maxInFlight nor maxInFlightPct, so it limits nothing"
  ];
}
