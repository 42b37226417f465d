# One channel of four kiosks rolled out all at once, with no budget: the
# policy says so with an empty wave list (waves = [ ]) next to its
# strategy, and every kiosk is dispatched together.
{ system }:
let
  kiosk = name: {
    system = "x86_64-linux";
    configuration = system name;
    channel = "kiosks";
    tags = [ "kiosk" ];
  };
in
{
  input = {
    hosts = {
      kiosk-a = kiosk "kiosk-a";
      kiosk-b = kiosk "kiosk-b";
      kiosk-c = kiosk "kiosk-c";
      kiosk-d = kiosk "kiosk-d";
    };
    channels.kiosks = {
      rolloutPolicy = "together";
      freshnessWindow = 2880;
      signingIntervalMinutes = 1440;
      reconcileIntervalMinutes = 10;
    };
    rolloutPolicies.together = {
      strategy = "all-at-once";
      waves = [ ];
    };
  };
}
