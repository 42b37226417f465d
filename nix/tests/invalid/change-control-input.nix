# Change-control input fleet.resolved cannot carry: windows that are not
# lists, unknown, missing and mistyped members of a window, a host
# selector without windows or naming an unknown host, and freezes whose
# times Go would not decode, missing their reason or naming channels as a
# string. Only input problems: the mistyped members are left out of the
# document's checks.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
in
{
  input = c.fleet // {
    rolloutPolicies.all = {
      windows = "weekends";
      waves = [
        {
          selector.all = true;
          windows = [
            {
              day = [ "sat" ];
              start = "22:00";
              durationMinutes = "60";
              timeZone = 1;
            }
          ];
        }
      ];
      hostWindows = [
        { selector.hosts = [ "z" ]; }
        {
          selector.tags = [ "db" ];
          windows = [ [ ] ];
        }
      ];
    };
    freezes = [
      {
        from = "2026-12-20";
        until = "2027-01-04t00:00:00z";
        reason = "holiday freeze";
        channels = "stable";
      }
      {
        from = 1;
        until = "2027-02-29T00:00:00Z";
      }
    ];
  };
  errors = [
    "rollout policy \"all\" wave 0: windows[0]: unknown attribute \"day\""
    "rollout policy \"all\" wave 0: windows[0]: days is required"
    "rollout policy \"all\" wave 0: windows[0]: durationMinutes must be an integer (minutes)"
    "rollout policy \"all\" wave 0: windows[0]: timeZone must be a string (an IANA time zone such as \"Europe/Berlin\")"
    "rollout policy \"all\": windows must be a list of { days; start; durationMinutes; timeZone; }"
    "rollout policy \"all\" hostWindows[0]: windows is required"
    "rollout policy \"all\" hostWindows[0] selector: host \"z\" does not exist"
    "rollout policy \"all\" hostWindows[1]: windows[0]: must be an attribute set, not a list"
    "freezes[0]: from \"2026-12-20\" is not an RFC 3339 time such as \"2026-12-20T00:00:00Z\""
    "freezes[0]: until \"2027-01-04t00:00:00z\" is not an RFC 3339 time such as \"2026-12-20T00:00:00Z\""
    "freezes[0]: channels must be a list of channel names"
    "freezes[1]: reason is required"
    "freezes[1]: from must be a string (an RFC 3339 time such as \"2026-12-20T00:00:00Z\")"
    "freezes[1]: until \"2027-02-29T00:00:00Z\" is not an RFC 3339 time such as \"2026-12-20T00:00:00Z\""
  ];
  warnings = [ "rollout policy \"all\" hostWindows[0]: selector matches no host" ];
}
