# Canary analyses the Go side refuses (manifest.ValidateFleet, with
# analysis.Problems), each problem in Go's order within an analysis: its
# name (empty, malformed, or an earlier analysis's of the same gate; a
# malformed name takes none, and another gate may reuse a name), the
# query (empty, too long, unknown placeholders once each in the order
# they first appear, braces outside a placeholder), the conditions, the
# interval (its form, then at most 24h), the count, the limits and the
# Prometheus source (its form; "default" is reserved). The bounds
# themselves, placeholders with and without spaces, a source of 63
# characters and an empty failureCondition or source (none) are fine. Strings with quotes, backslashes and
# control characters are quoted as Go's %q quotes them.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  waves = c.fleet.rolloutPolicies.all.waves;
  # 4097 bytes.
  longQuery = builtins.concatStringsSep "" (builtins.genList (_: "x") 4097);
  # The longest source name.
  long63 = builtins.concatStringsSep "" (builtins.genList (_: "s") 63);
in
{
  input = c.fleet // {
    rolloutPolicies = {
      all = {
        inherit waves;
        healthGate.analysis = [
          {
            name = "";
            query = "";
            successCondition = "result = 1";
            failureCondition = "failure > 1";
            interval = "0s";
            count = 0;
            failureLimit = -1;
            inconclusiveLimit = -2;
          }
          {
            name = "error-rate";
            query = ''sum(rate(http_requests_total{code=~"5..",host=~"{{ .HostsRegex }}",rollout="{{.RolloutId}}"}[2m])) {{ .Foo}} {{.RolloutId }} }}'';
            successCondition = "result < 1234567890123456";
            failureCondition = "result > 1e100";
            interval = "25h";
            count = 1001;
          }
          {
            name = "Error Rate";
            query = longQuery;
            successCondition = "result<=.5e-10";
            interval = "1000000s";
          }
          {
            name = "error-rate";
            query = ''up{host=~"{{ .HostsRegex }}"}'';
            successCondition = ''result < "1\"'';
            failureCondition = "result >= 1\r";
            interval = "86401s";
          }
          {
            name = "Error Rate";
            query = "{{{{ .Wave }}}}";
            successCondition = " result>=-1.5e+3 ";
            failureCondition = "";
            interval = "1440m";
            count = 1000;
            failureLimit = 0;
            inconclusiveLimit = 3;
          }
          {
            name = "latency";
            query = ''histogram_quantile(0.99, rate(x{host=~"{{.HostsRegex}}",channel="{{   .Channel   }}",wave="{{ .Wave }}",rollout="{{ .RolloutID }}"}[5m]))'';
            successCondition = "result < .5";
            failureCondition = "result>=1.";
            interval = "24h";
          }
          {
            name = "latency";
            query = "a{b}c {{ .wave }} {{ . Wave }} {{ .wave }}";
            successCondition = "result != -0";
            interval = "5m";
          }
        ];
      };
      empty = {
        inherit waves;
        healthGate.analysis = [ ];
      };
      other = {
        inherit waves;
        healthGate.analysis = [
          {
            name = "error-rate";
            query = "up";
            successCondition = "result == 1";
          }
          {
            name = "a\tb";
            query = "up";
            successCondition = "result == 1";
          }
          {
            name = "tenant-a";
            query = "up";
            successCondition = "result == 1";
            source = "Team A";
          }
          {
            name = "tenant-b";
            query = "up";
            successCondition = "result == 1";
            source = "default";
          }
          {
            name = "tenant-c";
            query = "up";
            successCondition = "result == 1";
            source = "-team";
          }
          {
            name = "tenant-d";
            query = "up";
            successCondition = "result == 1";
            source = long63;
          }
          {
            name = "tenant-e";
            query = "up";
            successCondition = "result == 1";
            source = "";
          }
          {
            name = "tenant-f";
            query = "up";
            successCondition = "result == 1";
            source = "${long63}x";
          }
        ];
      };
    };
  };
  errors = [
    "rollout policy \"all\": healthGate.analysis[0]: name is empty"
    "rollout policy \"all\": healthGate.analysis[0]: query is empty"
    "rollout policy \"all\": healthGate.analysis[0]: successCondition \"result = 1\" is not \"result <op> <number>\" with <op> one of <, <=, >, >=, ==, !="
    "rollout policy \"all\": healthGate.analysis[0]: failureCondition \"failure > 1\" is not \"result <op> <number>\" with <op> one of <, <=, >, >=, ==, !="
    "rollout policy \"all\": healthGate.analysis[0]: interval \"0s\" is not a whole number of seconds, minutes or hours like \"30s\", \"5m\" or \"1h\""
    "rollout policy \"all\": healthGate.analysis[0]: count 0 must be between 1 and 1000"
    "rollout policy \"all\": healthGate.analysis[0]: failureLimit -1 is negative"
    "rollout policy \"all\": healthGate.analysis[0]: inconclusiveLimit -2 is negative"
    "rollout policy \"all\": healthGate.analysis[1]: query: {{ .RolloutId }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)"
    "rollout policy \"all\": healthGate.analysis[1]: query: {{ .Foo }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)"
    "rollout policy \"all\": healthGate.analysis[1]: query: \"{{\" or \"}}\" outside a placeholder"
    "rollout policy \"all\": healthGate.analysis[1]: successCondition \"result < 1234567890123456\" is not \"result <op> <number>\" with <op> one of <, <=, >, >=, ==, !="
    "rollout policy \"all\": healthGate.analysis[1]: failureCondition \"result > 1e100\" is not \"result <op> <number>\" with <op> one of <, <=, >, >=, ==, !="
    "rollout policy \"all\": healthGate.analysis[1]: interval \"25h\" is longer than 24h"
    "rollout policy \"all\": healthGate.analysis[1]: count 1001 must be between 1 and 1000"
    "rollout policy \"all\": healthGate.analysis[2]: name \"Error Rate\" must be letters, digits, '.', '_' or '-', at most 40 long"
    "rollout policy \"all\": healthGate.analysis[2]: query is 4097 bytes, more than 4096"
    "rollout policy \"all\": healthGate.analysis[2]: interval \"1000000s\" is not a whole number of seconds, minutes or hours like \"30s\", \"5m\" or \"1h\""
    "rollout policy \"all\": healthGate.analysis[3]: name \"error-rate\" is already analysis[1]'s"
    ''rollout policy "all": healthGate.analysis[3]: successCondition "result < \"1\\\"" is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=''
    ''rollout policy "all": healthGate.analysis[3]: failureCondition "result >= 1\r" is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=''
    "rollout policy \"all\": healthGate.analysis[3]: interval \"86401s\" is longer than 24h"
    "rollout policy \"all\": healthGate.analysis[4]: name \"Error Rate\" must be letters, digits, '.', '_' or '-', at most 40 long"
    "rollout policy \"all\": healthGate.analysis[4]: query: \"{{\" or \"}}\" outside a placeholder"
    "rollout policy \"all\": healthGate.analysis[6]: name \"latency\" is already analysis[5]'s"
    "rollout policy \"all\": healthGate.analysis[6]: query: {{ .wave }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)"
    "rollout policy \"all\": healthGate.analysis[6]: query: \"{{\" or \"}}\" outside a placeholder"
    ''rollout policy "other": healthGate.analysis[1]: name "a\tb" must be letters, digits, '.', '_' or '-', at most 40 long''
    "rollout policy \"other\": healthGate.analysis[2]: source \"Team A\" must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit"
    "rollout policy \"other\": healthGate.analysis[3]: source \"default\" is reserved: leave source out to query the control plane's default Prometheus"
    "rollout policy \"other\": healthGate.analysis[4]: source \"-team\" must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit"
    "rollout policy \"other\": healthGate.analysis[7]: source \"${long63}x\" must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit"
  ];
}
