# A host on a channel the fleet does not declare, and a channel edge to
# another.
{ system }:
let
  c = import ../common.nix { inherit system; };
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      d = c.host "stabel" [ "web" ] "d";
    };
    channelEdges = [
      {
        gates = "edge";
        gated = "nightly";
      }
    ];
  };
  errors = [
    "host \"d\": channel \"stabel\" does not exist"
    "channelEdges[0]: gated channel \"nightly\" does not exist"
  ];
}
