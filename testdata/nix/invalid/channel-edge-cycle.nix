# Channel edges that form a cycle, one of them in the legacy spelling.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
in
{
  input = fleet // {
    channelEdges = [
      {
        gates = "edge";
        gated = "stable";
      }
      {
        before = "stable";
        after = "edge";
      }
    ];
  };
  errors = [ "channelEdges form a cycle: edge -> stable -> edge" ];
}
