# Canary analyses that compare a wave's canary with its baseline
# (proto.Comparison): one gives only `worse` and takes the defaults
# (confidence "0.95", effect "0", minSamples 10, window "10m", step
# "30s"), one gives every member at its bounds (confidence "0.5", "-0" as
# effect, minSamples 3, a window of 1000 steps), one "0.999", "1e2" and
# 10000 samples in one step of a day, and one without compare stays
# without it (no null in the document). Each keeps its successCondition,
# which judges the last wave (no baseline left).
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
in
{
  input = c.fleet // {
    rolloutPolicies.all = {
      waves = [
        {
          selector.tags = [ "web" ];
          soakMinutes = 30;
        }
        { selector.all = true; }
      ];
      healthGate.analysis = [
        {
          name = "error-ratio";
          query = ''sum(rate(http_requests_total{code=~"5..",host=~"{{ .HostsRegex }}"}[2m])) / sum(rate(http_requests_total{host=~"{{ .HostsRegex }}"}[2m]))'';
          successCondition = "result < 0.01";
          compare = {
            worse = "higher";
            baselineTags = [ "web" ];
          };
        }
        {
          name = "throughput";
          query = ''sum(rate(jobs_done_total{host=~"{{.HostsRegex}}"}[1m]))'';
          successCondition = "result > 0";
          interval = "5m";
          count = 3;
          compare = {
            worse = "lower";
            confidence = "0.5";
            effect = "-0";
            minSamples = 3;
            window = "1000s";
            step = "1s";
          };
        }
        {
          name = "latency";
          query = ''histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{host=~"{{ .HostsRegex }}"}[5m])))'';
          successCondition = "result <= 0.25";
          compare = {
            worse = "higher";
            confidence = "0.999";
            effect = "1e2";
            minSamples = 10000;
            window = "24h";
            step = "1440m";
          };
        }
        {
          name = "up";
          query = "min(up{host=~\"{{ .HostsRegex }}\"})";
          successCondition = "result == 1";
          compare = null;
        }
      ];
    };
  };
}
