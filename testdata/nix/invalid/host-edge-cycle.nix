# Host edges that form a cycle: reported as its path.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
in
{
  input = fleet // {
    edges = [
      {
        gates = "a";
        gated = "b";
      }
      {
        gates = "b";
        gated = "c";
      }
      {
        gates = "c";
        gated = "a";
        reason = "closes the loop";
      }
    ];
  };
  errors = [ "edges form a cycle: a -> b -> c -> a" ];
}
