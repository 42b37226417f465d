# A host edge that makes a host wait for a host of a later wave of its
# channel: that wave cannot start before the waiting host's wave is
# promoted, so the rollout would never move. Edges within one wave, from an
# earlier wave to a later one, and edges touching a host no wave lists
# (here one without a configuration) are fine. The backward edge closes a
# cycle too, which is reported as well.
{ system }:
let
  c = import ../common.nix { inherit system; };
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      spare = {
        system = "x86_64-linux";
        channel = "stable";
        tags = [ "spare" ];
      };
    };
    channels = c.fleet.channels // {
      stable = c.fleet.channels.stable // {
        rolloutPolicy = "web-first";
      };
    };
    rolloutPolicies = c.fleet.rolloutPolicies // {
      # stable: a and b in wave 0, c in wave 1, spare in none.
      web-first.waves = [
        { selector.tags = [ "web" ]; }
        { selector.tags = [ "db" ]; }
      ];
    };
    edges = [
      {
        gates = "a";
        gated = "b";
        reason = "one wave";
      }
      {
        gates = "a";
        gated = "c";
        reason = "wave 0 before wave 1";
      }
      {
        gates = "c";
        gated = "b";
        reason = "wave 0 waiting for wave 1";
      }
      {
        gates = "b";
        gated = "c";
      }
      {
        gates = "spare";
        gated = "a";
      }
      {
        gates = "c";
        gated = "spare";
      }
    ];
  };
  errors = [
    "edges[2]: \"c\" (wave 1 of channel \"stable\") gates \"b\" (wave 0), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave"
    "edges form a cycle: b -> c -> b"
  ];
  warnings = [
    "host \"spare\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
  ];
}
