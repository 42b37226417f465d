# Shared by the invalid cases (invalid/*.nix): a small valid fleet each
# case breaks in one way.
{ system }:
rec {
  host = channel: tags: name: {
    system = "x86_64-linux";
    configuration = system name;
    inherit channel tags;
  };
  fleet = {
    hosts = {
      a = host "stable" [ "web" ] "a";
      b = host "stable" [ "web" ] "b";
      c = host "stable" [ "db" ] "c";
      e = host "edge" [ "lab" ] "e";
    };
    channels = {
      stable = {
        rolloutPolicy = "all";
        freshnessWindow = 180;
      };
      edge = {
        rolloutPolicy = "all";
        freshnessWindow = 180;
      };
    };
    rolloutPolicies.all.waves = [ { selector.all = true; } ];
  };
}
