# A channel rolled out all at once (edge, whose policy has no waves) next
# to one whose waves miss a host: only the missed host is an error. Host
# edges inside the all-at-once channel are within its one wave, so only
# their cycle is reported, never their order.
{ system }:
let
  c = import ../common.nix { inherit system; };
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      f = c.host "edge" [ "lab" ] "f";
      g = c.host "edge" [ "lab" ] "g";
    };
    channels = c.fleet.channels // {
      edge = c.fleet.channels.edge // {
        rolloutPolicy = "now";
      };
    };
    rolloutPolicies = {
      all.waves = [ { selector.tags = [ "web" ]; } ];
      now.strategy = "all-at-once";
    };
    edges = [
      {
        gates = "e";
        gated = "f";
      }
      {
        gates = "f";
        gated = "g";
      }
      {
        gates = "g";
        gated = "e";
      }
    ];
  };
  errors = [
    "host \"c\": no wave of channel \"stable\" lists it, so it would never be rolled out"
    "edges form a cycle: e -> f -> g -> e"
  ];
}
