# What a wave needs before the next one starts: health-gate minimums of
# converged hosts (minConverged, minConvergedPct) and canary analyses
# (with their defaults filled in), carried into fleet.resolved and from
# there into each channel's manifest, and host
# edges that follow the wave order: within one wave, from an earlier wave
# to a later one, and from a host no wave lists (it has no configuration).
# Its waves and budgets have names, carried into the policy, waves.<channel>
# and the manifests' budgets.
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
      canary-01 = host "canary-01" "stable" [
        "canary"
        "web"
      ];
      web-01 = host "web-01" "stable" [ "web" ];
      web-02 = host "web-02" "stable" [ "web" ];
      db-01 = host "db-01" "stable" [ "db" ];
      db-02 = host "db-02" "stable" [ "db" ];
      # Not built, and taken by no wave.
      spare-01 = {
        system = "x86_64-linux";
        channel = "stable";
        tags = [ "spare" ];
      };
      lab-01 = host "lab-01" "lab" [ "lab" ];
      lab-02 = host "lab-02" "lab" [ "lab" ];
    };
    channels = {
      stable = {
        rolloutPolicy = "gated";
        freshnessWindow = 180;
      };
      lab = {
        rolloutPolicy = "everyone";
        freshnessWindow = 180;
      };
    };
    rolloutPolicies = {
      gated = {
        waves = [
          {
            name = "canary";
            selector.tags = [ "canary" ];
            soakMinutes = 15;
          }
          {
            name = "web";
            selector.tags = [ "web" ];
            soakMinutes = 10;
          }
          { selector.tags = [ "db" ]; }
        ];
        healthGate = {
          maxFailures = 1;
          minConverged = 2;
          minConvergedPct = 50;
          systemdFailedUnits.max = 0;
          analysis = [
            # Only what is required: the defaults are filled in.
            {
              name = "error-rate";
              query = ''sum(rate(http_requests_total{code=~"5..",host=~"{{ .HostsRegex }}"}[2m])) / sum(rate(http_requests_total{host=~"{{ .HostsRegex }}"}[2m]))'';
              successCondition = "result < 0.01";
            }
            # Everything given.
            {
              name = "latency";
              query = ''histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{host=~"{{.HostsRegex}}",wave="{{ .Wave }}"}[5m])))'';
              successCondition = "result <= 0.25";
              failureCondition = "result > 1";
              interval = "30s";
              count = 5;
              failureLimit = 1;
              inconclusiveLimit = 2;
              source = "team-a";
            }
            # An empty failureCondition is none, and an empty source the
            # control plane's default Prometheus: both left out.
            {
              name = "up";
              query = "min(up{job=\"nixfleet-agent\",host=~\"{{ .HostsRegex }}\"})";
              successCondition = "result == 1";
              failureCondition = "";
              source = "";
              count = 3;
            }
          ];
        };
      };
      everyone = {
        waves = [ { selector.channel = "lab"; } ];
        healthGate = {
          minConvergedPct = 100;
          # An empty list is left out.
          analysis = [ ];
        };
      };
    };
    disruptionBudgets = [
      {
        name = "web";
        selector.tags = [ "web" ];
        maxInFlight = 2;
      }
      {
        selector.tags = [ "db" ];
        maxInFlight = 1;
      }
    ];
    edges = [
      {
        gates = "canary-01";
        gated = "web-01";
        reason = "wave 0 before wave 1";
      }
      {
        gates = "web-01";
        gated = "web-02";
        reason = "within wave 1";
      }
      {
        gates = "canary-01";
        gated = "db-01";
        reason = "wave 0 before wave 2";
      }
      {
        gates = "db-01";
        gated = "db-02";
        reason = "within wave 2";
      }
      {
        gates = "spare-01";
        gated = "canary-01";
        reason = "no wave lists spare-01";
      }
      {
        gates = "lab-02";
        gated = "lab-01";
      }
    ];
  };
  warnings = [
    "host \"spare-01\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
  ];
}
