# A host edge across channels (channel edges order channels), and a host
# that gates itself.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
in
{
  input = fleet // {
    edges = [
      {
        gates = "e";
        gated = "a";
      }
      {
        gates = "b";
        gated = "b";
      }
      {
        gates = "a";
        gated = "ghost";
      }
    ];
  };
  errors = [
    "edges[0]: \"e\" (channel \"edge\") and \"a\" (channel \"stable\") are on different channels; use channelEdges to order channels"
    "edges[1]: host \"b\" gates itself"
    "edges[2]: gated host \"ghost\" does not exist"
  ];
}
