# Change control (rfcs/0010 §2.1): maintenance windows on a policy, on one
# of its waves and on the hosts two selectors pick (one with a combinator,
# written out as its hosts), and two freezes, one on a channel and one,
# with an empty channel list, on every channel. The lab's policy gives
# empty lists, which are left out like absent ones, as is the second
# wave's. Both waves have an approval gate: the canary's needs two
# approvers, the second's leaves approvers out (one).
{ system }:
let
  host = channel: tags: name: {
    system = "x86_64-linux";
    configuration = system name;
    inherit channel tags;
  };
in
{
  input = {
    hosts = {
      web-01 = host "prod" [
        "web"
        "canary"
      ] "web-01";
      web-02 = host "prod" [ "web" ] "web-02";
      web-03 = host "prod" [ "web" ] "web-03";
      db-01 = host "prod" [ "db" ] "db-01";
      lab-01 = host "lab" [ "lab" ] "lab-01";
    };
    channels = {
      prod = {
        rolloutPolicy = "windowed";
        freshnessWindow = 1440;
      };
      lab = {
        rolloutPolicy = "anytime";
        freshnessWindow = 180;
      };
    };
    rolloutPolicies = {
      windowed = {
        windows = [
          {
            days = [
              "sat"
              "sun"
            ];
            start = "22:00";
            durationMinutes = 240;
            timeZone = "Europe/Berlin";
          }
        ];
        hostWindows = [
          {
            selector.tags = [ "db" ];
            windows = [
              {
                days = [ "sun" ];
                start = "03:00";
                durationMinutes = 120;
                timeZone = "UTC";
              }
            ];
          }
          {
            selector = {
              tags = [ "web" ];
              not.tags = [ "canary" ];
            };
            windows = [
              {
                days = [
                  "tue"
                  "thu"
                ];
                start = "23:30";
                durationMinutes = 90;
                timeZone = "America/Argentina/Buenos_Aires";
              }
              {
                days = [ "sat" ];
                start = "00:00";
                durationMinutes = 10080;
                timeZone = "Etc/GMT+5";
              }
            ];
          }
        ];
        waves = [
          {
            name = "canary";
            selector.tags = [ "canary" ];
            soakMinutes = 30;
            approval = {
              required = true;
              approvers = 2;
            };
            windows = [
              {
                days = [
                  "mon"
                  "tue"
                  "wed"
                  "thu"
                  "fri"
                ];
                start = "09:00";
                durationMinutes = 480;
                timeZone = "Europe/Berlin";
              }
            ];
          }
          {
            selector.all = true;
            soakMinutes = 60;
            windows = [ ];
            approval.required = true;
          }
        ];
      };
      anytime = {
        strategy = "all-at-once";
        windows = [ ];
        hostWindows = [ ];
      };
    };
    freezes = [
      {
        from = "2026-12-20T00:00:00Z";
        until = "2027-01-04T00:00:00Z";
        reason = "holiday freeze";
        channels = [ "prod" ];
      }
      {
        from = "2026-11-26T18:00:00+01:00";
        until = "2026-11-27T06:00:00+01:00";
        reason = "datacenter move";
        channels = [ ];
      }
    ];
  };
}
