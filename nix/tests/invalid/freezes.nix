# Freezes the Go side refuses: a period that ends before it begins or when
# it begins, a reason that is blank, on two lines or too long, and channels
# that are not declared or named twice.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  freeze = {
    from = "2026-12-20T00:00:00Z";
    until = "2027-01-04T00:00:00Z";
    reason = "holiday freeze";
  };
in
{
  input = c.fleet // {
    freezes = [
      (
        freeze
        // {
          from = "2027-01-04T00:00:00Z";
          until = "2026-12-20T00:00:00Z";
        }
      )
      (freeze // { until = freeze.from; })
      (freeze // { reason = ""; })
      (freeze // { reason = "   "; })
      (freeze // { reason = "holiday\nfreeze"; })
      (freeze // { reason = builtins.concatStringsSep "" (builtins.genList (_: "x") 201); })
      (
        freeze
        // {
          channels = [
            "stable"
            "prod"
            "stable"
          ];
        }
      )
      # Fine: a reason of 200 bytes, every channel.
      (
        freeze
        // {
          reason = builtins.concatStringsSep "" (builtins.genList (_: "x") 200);
          channels = [ ];
        }
      )
    ];
  };
  errors = [
    "freezes[0]: until 2026-12-20T00:00:00Z is not after from 2027-01-04T00:00:00Z"
    "freezes[1]: until 2026-12-20T00:00:00Z is not after from 2026-12-20T00:00:00Z"
    "freezes[2]: reason is empty; say why nothing may roll out"
    "freezes[3]: reason is empty; say why nothing may roll out"
    "freezes[4]: reason must be at most 200 bytes on one line"
    "freezes[5]: reason must be at most 200 bytes on one line"
    "freezes[6]: channel \"prod\" does not exist"
    "freezes[6]: channel \"stable\" is listed twice"
  ];
}
