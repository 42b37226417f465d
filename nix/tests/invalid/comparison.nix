# Comparisons the Go side refuses (analysis.Problems, item 6), each
# problem in Go's order after the analysis's others: confidence (a number
# as the conditions write one, from 0.5 to 0.999), effect (at least 0),
# minSamples (3 to 10000), step, then window (each written as interval
# is, at most 24h), step at most window, window at most 1000 steps,
# worse ("higher" or "lower"), and a query that selects hosts by
# {{ .HostsRegex }} (not checked again when empty). successCondition is
# still checked. Numbers written in every form the conditions allow are
# fine, and so are the bounds.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  waves = c.fleet.rolloutPolicies.all.waves;
  query = ''sum(rate(errors_total{host=~"{{ .HostsRegex }}"}[2m]))'';
  ok = {
    worse = "higher";
  };
  at = i: "rollout policy \"all\": healthGate.analysis[${toString i}]: ";
  notInterval = s: "interval \"${s}\" is not a whole number of seconds, minutes or hours like \"30s\", \"5m\" or \"1h\"";
in
{
  input = c.fleet // {
    rolloutPolicies.all = {
      inherit waves;
      healthGate.analysis = [
        # 0: every member wrong, in order, after the analysis's own.
        {
          name = "everything";
          query = "up";
          successCondition = "result = 1";
          count = 0;
          compare = {
            worse = "Higher";
            confidence = "95%";
            effect = "-0.01";
            minSamples = 2;
            window = "30s";
            step = "1m";
          };
        }
        # 1: the bounds, and numbers in the conditions' forms.
        {
          name = "bounds-low";
          inherit query;
          successCondition = "result < 1";
          compare = {
            worse = "lower";
            confidence = ".5";
            effect = "0.";
            minSamples = 3;
            window = "1000s";
            step = "1s";
          };
        }
        # 2
        {
          name = "bounds-high";
          inherit query;
          successCondition = "result < 1";
          compare = ok // {
            confidence = "9.99E-1";
            effect = "000012345678901.123456789012345e+99";
            minSamples = 10000;
            window = "1440m";
            step = "24h";
          };
        }
        # 3: just past the bounds.
        {
          name = "bounds-past";
          inherit query;
          successCondition = "result < 1";
          compare = ok // {
            confidence = "0.4999";
            effect = "-.0000000000001";
            minSamples = 10001;
            window = "2001s";
            step = "2s";
          };
        }
        # 4
        {
          name = "numbers";
          inherit query;
          successCondition = "result < 1";
          compare = ok // {
            confidence = "0.9991";
            effect = "1,5";
            minSamples = 0;
            window = "25h";
            step = "0s";
          };
        }
        # 5
        {
          name = "more-numbers";
          inherit query;
          successCondition = "result < 1";
          compare = ok // {
            confidence = "1";
            effect = " 1";
            window = "1d";
            step = "86401s";
          };
        }
        # 6
        {
          name = "most-numbers";
          inherit query;
          successCondition = "result < 1";
          compare = ok // {
            confidence = "1234567890123456";
            effect = "1e100";
            window = "1001s";
            step = "1s";
          };
        }
        # 7: no hosts in the query, a misspelt placeholder, none at all.
        {
          name = "no-hosts";
          query = ''sum(rate(errors_total{wave="{{ .Wave }}",host=~"{{ .Hostsregex }}"}[2m]))'';
          successCondition = "result < 1";
          compare = ok;
        }
        # 8: an empty query is reported once, worse empty.
        {
          name = "empty";
          query = "";
          successCondition = "result < 1";
          compare.worse = "";
        }
        # 9: a placeholder without spaces is one.
        {
          name = "tight";
          query = "up{host=~\"{{.HostsRegex}}\"}";
          successCondition = "result < 1";
          compare = ok;
        }
        # 10: too many baseline tags, one of them empty.
        {
          name = "tags";
          query = "up{host=~\"{{ .HostsRegex }}\"}";
          successCondition = "result < 1";
          compare = ok // {
            baselineTags = [ "a" "b" "" "d" "e" "f" "g" "h" "i" ];
          };
        }
      ];
    };
  };
  errors = [
    "${at 0}successCondition \"result = 1\" is not \"result <op> <number>\" with <op> one of <, <=, >, >=, ==, !="
    "${at 0}count 0 must be between 1 and 1000"
    "${at 0}compare.confidence \"95%\" must be a decimal number from 0.5 to 0.999"
    "${at 0}compare.effect \"-0.01\" must be a decimal number of at least 0"
    "${at 0}compare.minSamples 2 must be between 3 and 10000"
    "${at 0}compare.step 1m is longer than compare.window 30s"
    "${at 0}compare.worse \"Higher\" must be \"higher\" or \"lower\""
    "${at 0}compare: the query must select hosts by {{ .HostsRegex }}, which stands for each group's hosts"
    "${at 3}compare.confidence \"0.4999\" must be a decimal number from 0.5 to 0.999"
    "${at 3}compare.effect \"-.0000000000001\" must be a decimal number of at least 0"
    "${at 3}compare.minSamples 10001 must be between 3 and 10000"
    "${at 3}compare.window 2001s is more than 1000 steps of 2s"
    "${at 4}compare.confidence \"0.9991\" must be a decimal number from 0.5 to 0.999"
    "${at 4}compare.effect \"1,5\" must be a decimal number of at least 0"
    "${at 4}compare.minSamples 0 must be between 3 and 10000"
    "${at 4}compare.step: ${notInterval "0s"}"
    "${at 4}compare.window: interval \"25h\" is longer than 24h"
    "${at 5}compare.confidence \"1\" must be a decimal number from 0.5 to 0.999"
    "${at 5}compare.effect \" 1\" must be a decimal number of at least 0"
    "${at 5}compare.step: interval \"86401s\" is longer than 24h"
    "${at 5}compare.window: ${notInterval "1d"}"
    "${at 6}compare.confidence \"1234567890123456\" must be a decimal number from 0.5 to 0.999"
    "${at 6}compare.effect \"1e100\" must be a decimal number of at least 0"
    "${at 6}compare.window 1001s is more than 1000 steps of 1s"
    "${at 7}query: {{ .Hostsregex }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)"
    "${at 7}compare: the query must select hosts by {{ .HostsRegex }}, which stands for each group's hosts"
    "${at 8}query is empty"
    "${at 8}compare.worse \"\" must be \"higher\" or \"lower\""
    "${at 10}compare.baselineTags has 9 tags, at most 8"
    "${at 10}compare.baselineTags[2] is empty"
  ];
}
