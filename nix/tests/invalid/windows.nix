# Maintenance windows the Go side refuses (schedule.Check), one problem per
# window so each message stands alone, then one window with several, which
# both sides join with "; ". A wave's window is reported on the policy's
# wave and again on the waves of both channels it is copied to.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  window = {
    days = [ "sat" ];
    start = "22:00";
    durationMinutes = 60;
    timeZone = "Europe/Berlin";
  };
in
{
  input = c.fleet // {
    rolloutPolicies.all = {
      waves = [
        {
          selector.all = true;
          windows = [
            (
              window
              // {
                days = [
                  "sat"
                  "sun"
                  "sat"
                ];
              }
            )
          ];
        }
      ];
      windows = [
        (
          window
          // {
            days = [
              "sat"
              "caturday"
            ];
          }
        )
        (window // { start = "24:00"; })
        (window // { durationMinutes = 0; })
        (window // { durationMinutes = 10081; })
        (window // { timeZone = ""; })
        window
        (
          window
          // {
            days = [ ];
            start = "9:30";
            timeZone = "Europe Berlin";
          }
        )
      ];
      hostWindows = [
        {
          selector.tags = [ "db" ];
          windows = [ ];
        }
        {
          selector.tags = [ "web" ];
          windows = [
            window
            (window // { start = "21:60"; })
          ];
        }
      ];
    };
  };
  errors = [
    "rollout policy \"all\" wave 0: windows[0]: day \"sat\" is listed twice"
    "rollout policy \"all\": windows[0]: day \"caturday\" is not one of mon, tue, wed, thu, fri, sat, sun"
    "rollout policy \"all\": windows[1]: start \"24:00\" is not a time of day HH:MM (00:00 to 23:59)"
    "rollout policy \"all\": windows[2]: durationMinutes 0 must be between 1 and 10080"
    "rollout policy \"all\": windows[3]: durationMinutes 10081 must be between 1 and 10080"
    "rollout policy \"all\": windows[4]: time zone \"\": name an IANA zone, like Europe/Berlin or UTC"
    "rollout policy \"all\": windows[6]: days is empty; start \"9:30\" is not HH:MM; time zone \"Europe Berlin\" is not in the IANA database"
    "rollout policy \"all\" hostWindows[0]: windows is empty"
    "rollout policy \"all\" hostWindows[1]: windows[1]: start \"21:60\" is not a time of day HH:MM (00:00 to 23:59)"
    "waves.edge[0]: windows[0]: day \"sat\" is listed twice"
    "waves.stable[0]: windows[0]: day \"sat\" is listed twice"
  ];
}
