# mkFleet: a fleet declared in Nix, resolved into fleet.resolved.json v1
# (rfcs/0001 §2) and validated as manifest.ValidateFleet does (rfcs/0001 §3).
# rfcs/0010 describes the inputs and outputs; in short:
#
#   fleet = mkFleet {
#     hosts.web-01 = { system = "x86_64-linux"; configuration = nixosSystem { … };
#                      tags = [ "web" ]; channel = "stable"; pubkey = "ssh-ed25519 AAAA…"; };
#     channels.stable = { rolloutPolicy = "canary"; freshnessWindow = 180; };
#     rolloutPolicies.canary.waves = [ { name = "canary"; selector.tags = [ "canary" ]; soakMinutes = 15; }
#                                      { selector.all = true; } ];
#     disruptionBudgets = [ { name = "web"; selector.tags = [ "web" ]; maxInFlight = 2; } ];
#     # or every host of the channel at once, under the budgets:
#     # rolloutPolicies.now.strategy = "all-at-once";
#     # change control: maintenance windows (per policy, per wave, per host
#     # selector) and freezes
#     # rolloutPolicies.canary.windows = [ { days = [ "sat" ]; start = "22:00";
#     #   durationMinutes = 240; timeZone = "Europe/Berlin"; } ];
#     # freezes = [ { from = "2026-12-20T00:00:00Z"; until = "2027-01-04T00:00:00Z";
#     #   reason = "holiday freeze"; channels = [ "stable" ]; } ];
#     # and approval gates: a wave that waits for approvers
#     # { selector.all = true; approval = { required = true; approvers = 2; }; }
#     # canary analysis: queries that judge each wave while it soaks
#     # rolloutPolicies.canary.healthGate.analysis = [ { name = "error-rate";
#     #   query = "…{{ .HostsRegex }}…"; successCondition = "result < 0.01";
#     #   source = "team-a"; } ];  # source: a [[prometheus.source]] of the
#     #   # control plane (its credentials stay there); none: its default
#     # an analysis may compare the wave's hosts that run the release with
#     # hosts of the rollout that do not yet (Mann–Whitney), instead of its
#     # conditions (which then judge only a wave with no baseline left):
#     #   compare = { worse = "higher"; };  # or "lower"; the rest defaults to
#     #   # { confidence = "0.95"; effect = "0"; minSamples = 10;
#     #   #   window = "10m"; step = "30s"; } (numbers as decimal strings);
#     #   # baselineTags = [ "web" ]: a baseline of hosts with those tags only
#     # reboots: the control plane reboots hosts whose target is staged for
#     # the next boot (a new kernel), wave by wave, under the same gates
#     # rolloutPolicies.canary.reboot = { allowed = true; bootTimeoutMinutes = 15;
#     #   kexec = false; };  # a wave's own `reboot = false;` (or true) overrides
#     #   # allowed; true needs the policy's reboot, which gives the timeout
#     # a host's bootLoader ("systemd-boot", "grub" or "none") is read from its
#     # configuration's boot.loader; a host may give it instead (which
#     # spares `resolved` evaluating the configuration that far):
#     # hosts.ct-01 = { …; bootLoader = "none"; };  # none: refused on a
#     #   # channel whose policy reboots any wave
#   };
#   fleet.resolved    # the document CI signs; throws every problem at once
#   fleet.toplevels   # per host with a configuration: the system to build
#
# Builtins only: this file must evaluate without nixpkgs.
let
  u = import ./util.nix;
  sel = import ./selectors.nix;
  validate = import ./validate.nix;
  inherit (builtins)
    attrNames
    concatMap
    filter
    foldl'
    isAttrs
    isBool
    isInt
    isList
    isString
    length
    listToAttrs
    mapAttrs
    ;

  defaults = {
    signingIntervalMinutes = 60;
    reconcileIntervalMinutes = 5;
    complianceMode = "enforce";
    strategy = "staged";
    onHealthFailure = "halt";
    soakMinutes = 0;
    # A health gate's analysis (rfcs/0001 §2.3).
    analysisInterval = "1m";
    analysisCount = 1;
    analysisFailureLimit = 0;
    analysisInconclusiveLimit = 0;
    # An analysis's comparison (proto.Comparison); `worse` has none.
    compareConfidence = "0.95";
    compareEffect = "0";
    compareMinSamples = 10;
    compareWindow = "10m";
    compareStep = "30s";
  };

  filterAttrs =
    pred: set:
    listToAttrs (
      map (name: {
        inherit name;
        value = set.${name};
      }) (filter (name: pred name set.${name}) (attrNames set))
    );

  stringOr = d: v: if isString v then v else d;
  # { name = n; } for a non-empty name, else nothing: the optional `name`
  # of a budget or a wave is left out when it has none.
  nameOf = n: if isString n && n != "" then { name = n; } else { };
  intOr = d: v: if isInt v then v else d;
  attrsOr = v: if isAttrs v then v else { };
  listOr = v: if isList v then v else [ ];

  # `name` of `where` must satisfy pred when present (absent and null are
  # the defaults' business).
  optionalTyped =
    where: a: name: pred: what:
    if a ? ${name} && a.${name} != null && !(pred a.${name}) then [ "${where}: ${name} must be ${what}" ] else [ ];
  requiredTyped =
    where: a: name: pred: what:
    if a ? ${name} && !(pred a.${name}) then [ "${where}: ${name} must be ${what}" ] else [ ];

  # Input problems of the maintenance windows ws, the member `windows` of
  # `where`: a list of { days; start; durationMinutes; timeZone; }, each
  # member of its type. Their values are the document's business
  # (validate.nix, as schedule.Check on the Go side).
  windowsProblems =
    where: ws:
    if !(isList ws) then
      [ "${where}: windows must be a list of { days; start; durationMinutes; timeZone; }" ]
    else
      u.concatImap (
        i: w:
        let
          ww = "${where}: windows[${toString i}]";
          wa = attrsOr w;
        in
        u.shapeProblems ww {
          required = [
            "days"
            "start"
            "durationMinutes"
            "timeZone"
          ];
        } w
        ++ requiredTyped ww wa "days" u.isStringList "a list of day names (\"mon\" … \"sun\")"
        ++ requiredTyped ww wa "start" isString "a string \"HH:MM\""
        ++ requiredTyped ww wa "durationMinutes" isInt "an integer (minutes)"
        ++ requiredTyped ww wa "timeZone" isString "a string (an IANA time zone such as \"Europe/Berlin\")"
      ) ws;
  # The same for an optional `windows` member (absent and null: none).
  optionalWindowsProblems = where: a: if (a.windows or null) == null then [ ] else windowsProblems where a.windows;

  # Input problems of the optional approval gate of the wave a (of
  # `where`): { required; approvers ? 1; } (absent and null: none),
  # required a boolean, approvers an integer. A given approvers = 0 is
  # refused here, with the document's message: fleet.resolved cannot tell
  # it from none (Go's int, omitempty, 0 meaning 1), so the document's
  # checks, like Go's, read it as none.
  approvalProblems =
    where: a:
    let
      g = a.approval or null;
      gw = "${where}: approval";
      gg = attrsOr g;
    in
    if g == null then
      [ ]
    else
      u.shapeProblems gw {
        required = [ "required" ];
        optional = [ "approvers" ];
      } g
      ++ requiredTyped gw gg "required" isBool "a boolean"
      ++ optionalTyped gw gg "approvers" isInt "an integer (how many distinct approvers, 1 to 100)"
      ++ (
        if isInt (gg.approvers or null) && gg.approvers == 0 then
          [ "${where}: approval.approvers 0 must be between 1 and 100" ]
        else
          [ ]
      );

  # Input problems of the optional reboot step of the policy p (of
  # `where`): { allowed; bootTimeoutMinutes; kexec ? false; } (absent and
  # null: none), each member of its type. The timeout's bounds are the
  # document's business.
  rebootProblems =
    where: p:
    let
      r = p.reboot or null;
      rw = "${where}: reboot";
      rr = attrsOr r;
    in
    if r == null then
      [ ]
    else
      u.shapeProblems rw {
        required = [
          "allowed"
          "bootTimeoutMinutes"
        ];
        optional = [ "kexec" ];
      } r
      ++ requiredTyped rw rr "allowed" isBool "a boolean"
      ++ requiredTyped rw rr "bootTimeoutMinutes" isInt "an integer (minutes, 1 to 1440)"
      ++ optionalTyped rw rr "kexec" isBool "a boolean";

  # Input problems of the canary analyses of a health gate g, the member
  # `analysis` of the gate of `where` (absent and null: none): a list of
  # { name; query; successCondition; failureCondition?; interval?; count?;
  # failureLimit?; inconclusiveLimit?; source?; compare?; }, compare (absent
  # and null: none) a { worse; confidence?; effect?; minSamples?; window?;
  # step?; }, each member of its type. Their
  # values (an empty name, a bad condition, a count of 0, …) are the
  # document's business (validate.nix, as analysis.Problems on the Go
  # side), since fleet.resolved carries them as given.
  analysisProblems =
    where: g:
    let
      as = g.analysis or null;
    in
    if as == null then
      [ ]
    else if !(isList as) then
      [ "${where}: healthGate: analysis must be a list of { name; query; successCondition; }" ]
    else
      u.concatImap (
        i: x:
        let
          aw = "${where}: healthGate.analysis[${toString i}]";
          xa = attrsOr x;
        in
        u.shapeProblems aw {
          required = [
            "name"
            "query"
            "successCondition"
          ];
          optional = [
            "failureCondition"
            "interval"
            "count"
            "failureLimit"
            "inconclusiveLimit"
            "source"
            "compare"
          ];
        } x
        ++ requiredTyped aw xa "name" isString "a string"
        ++ requiredTyped aw xa "query" isString "a string (PromQL)"
        ++ requiredTyped aw xa "successCondition" isString "a string such as \"result < 0.01\""
        ++ optionalTyped aw xa "failureCondition" isString "a string such as \"result > 0.05\""
        ++ optionalTyped aw xa "interval" isString "a string such as \"30s\", \"5m\" or \"1h\""
        ++ optionalTyped aw xa "count" isInt "an integer (measurements, 1 to 1000)"
        ++ optionalTyped aw xa "failureLimit" isInt "an integer (failed measurements tolerated)"
        ++ optionalTyped aw xa "inconclusiveLimit" isInt "an integer (inconclusive measurements tolerated)"
        ++ optionalTyped aw xa "source" isString "a string (a Prometheus source of the control plane, like \"team-a\")"
        ++ compareProblems aw xa
      ) as;

  # Input problems of the optional comparison of the analysis a (of
  # `where`), absent and null: none.
  compareProblems =
    where: a:
    let
      c = a.compare or null;
      cw = "${where}: compare";
      cc = attrsOr c;
    in
    if c == null then
      [ ]
    else
      u.shapeProblems cw {
        required = [ "worse" ];
        optional = [
          "baselineTags"
          "confidence"
          "effect"
          "minSamples"
          "window"
          "step"
        ];
      } c
      ++ requiredTyped cw cc "worse" isString "a string, \"higher\" or \"lower\""
      ++ optionalTyped cw cc "confidence" isString "a string such as \"0.95\" (from 0.5 to 0.999)"
      ++ optionalTyped cw cc "effect" isString "a string such as \"0.01\" (at least 0)"
      ++ optionalTyped cw cc "minSamples" isInt "an integer (values per group, 3 to 10000)"
      ++ optionalTyped cw cc "window" isString "a string such as \"10m\""
      ++ optionalTyped cw cc "step" isString "a string such as \"30s\""
      ++ optionalTyped cw cc "baselineTags" u.isStringList "a list of strings (tags every baseline host carries)";

  # An analysis as fleet.resolved carries it: the defaults filled in,
  # failureCondition and source left out when not given or empty (Go's
  # omitempty: none; no source is the control plane's default Prometheus),
  # compare when not given (or not an attribute set), the required members
  # null and the optional ones their defaults where mistyped (an input
  # problem).
  analysisOut =
    x:
    let
      xa = attrsOr x;
    in
    {
      name = stringOr null (xa.name or null);
      query = stringOr null (xa.query or null);
      successCondition = stringOr null (xa.successCondition or null);
      interval = stringOr defaults.analysisInterval (xa.interval or null);
      count = intOr defaults.analysisCount (xa.count or null);
      failureLimit = intOr defaults.analysisFailureLimit (xa.failureLimit or null);
      inconclusiveLimit = intOr defaults.analysisInconclusiveLimit (xa.inconclusiveLimit or null);
    }
    // (
      if isString (xa.failureCondition or null) && xa.failureCondition != "" then
        { inherit (xa) failureCondition; }
      else
        { }
    )
    // (if isString (xa.source or null) && xa.source != "" then { inherit (xa) source; } else { })
    // (if isAttrs (xa.compare or null) then { compare = compareOut xa.compare; } else { });

  # A comparison as fleet.resolved carries it: the defaults filled in,
  # worse null and the others their defaults where mistyped (an input
  # problem), baselineTags left out when not given or empty (Go's
  # omitempty).
  compareOut =
    c:
    {
      confidence = stringOr defaults.compareConfidence (c.confidence or null);
      effect = stringOr defaults.compareEffect (c.effect or null);
      minSamples = intOr defaults.compareMinSamples (c.minSamples or null);
      step = stringOr defaults.compareStep (c.step or null);
      window = stringOr defaults.compareWindow (c.window or null);
      worse = stringOr null (c.worse or null);
    }
    // (
      if u.isStringList (c.baselineTags or null) && c.baselineTags != [ ] then
        { inherit (c) baselineTags; }
      else
        { }
    );

  # { reboot = { allowed; bootTimeoutMinutes; kexec?; }; } for a policy's
  # reboot step, else nothing (absent, null, not an attribute set); kexec
  # left out unless true (Go's omitempty), the others null where mistyped
  # (an input problem).
  rebootOf =
    v:
    if isAttrs v then
      {
        reboot = {
          allowed = if isBool (v.allowed or null) then v.allowed else null;
          bootTimeoutMinutes = intOr null (v.bootTimeoutMinutes or null);
        }
        // (if (v.kexec or null) == true then { kexec = true; } else { });
      }
    else
      { };

  # { reboot = …; } for a wave's boolean reboot, else nothing (absent,
  # null: the policy's; mistyped: an input problem); a resolved wave
  # copies it from its policy wave.
  rebootOfWave = v: if isBool v then { reboot = v; } else { };

  # { bootLoader = …; } for the host h: the one it gives (a non-empty
  # string), else the one its configuration enables when it declares
  # boot.loader (a NixOS system: systemd-boot, else grub, else none),
  # else nothing (not declared: the test stand-ins of a system).
  bootLoaderOf =
    h:
    let
      given = h.bootLoader or null;
      conf = h.configuration or null;
      loader = if isAttrs conf then conf.config.boot.loader or null else null;
      enabled = l: isAttrs loader && (loader.${l}.enable or false) == true;
    in
    if isString given && given != "" then
      { bootLoader = given; }
    else if given != null || !(isAttrs loader) then
      { }
    else if enabled "systemd-boot" then
      { bootLoader = "systemd-boot"; }
    else if enabled "grub" then
      { bootLoader = "grub"; }
    else
      { bootLoader = "none"; };

  # A window as fleet.resolved carries it: its four members, null where
  # mistyped (an input problem).
  windowOut =
    w:
    let
      ww = attrsOr w;
    in
    {
      days = if u.isStringList (ww.days or null) then ww.days else null;
      start = stringOr null (ww.start or null);
      durationMinutes = intOr null (ww.durationMinutes or null);
      timeZone = stringOr null (ww.timeZone or null);
    };
  # { windows = [ … ]; } for a non-empty list of windows, else nothing:
  # like `name`, the optional `windows` of a policy or a wave is left out
  # when it has none.
  windowsOf = v: if isList v && v != [ ] then { windows = map windowOut v; } else { };
  # { approval = { required; approvers?; }; } for a wave's approval gate,
  # else nothing: copied as given, approvers left out when not given (it
  # then means 1), required null and approvers left out where mistyped (an
  # input problem). Absent and null: left out.
  approvalOf =
    v:
    if isAttrs v then
      {
        approval = {
          required = if isBool (v.required or null) then v.required else null;
        }
        // (if isInt (v.approvers or null) then { inherit (v) approvers; } else { });
      }
    else
      { };
in
args:
let
  a = attrsOr args;
  inHosts = attrsOr (a.hosts or { });
  inChannels = attrsOr (a.channels or { });
  inPolicies = attrsOr (a.rolloutPolicies or { });
  inEdges = listOr (a.edges or [ ]);
  inChannelEdges = listOr (a.channelEdges or [ ]);
  inBudgets = listOr (a.disruptionBudgets or [ ]);
  inFreezes = listOr (a.freezes or [ ]);

  # ---- input problems: shapes and types, and selector references ----

  topProblems =
    u.shapeProblems "mkFleet"
      {
        required = [
          "hosts"
          "channels"
          "rolloutPolicies"
        ];
        optional = [
          "edges"
          "channelEdges"
          "disruptionBudgets"
          "freezes"
        ];
      }
      args
    ++ concatMap (k: requiredTyped "mkFleet" a k isAttrs "an attribute set") [
      "hosts"
      "channels"
      "rolloutPolicies"
    ]
    ++ concatMap (k: optionalTyped "mkFleet" a k isList "a list") [
      "edges"
      "channelEdges"
      "disruptionBudgets"
      "freezes"
    ];

  selectorProblems = where: s: sel.problems where inHosts inChannels s;

  hostProblems = concatMap (
    name:
    let
      h = inHosts.${name};
      where = "host ${u.q name}";
      hh = attrsOr h;
      pin = hh.pin or null;
      conf = hh.configuration or null;
    in
    u.shapeProblems where {
      required = [
        "system"
        "channel"
      ];
      optional = [
        "configuration"
        "tags"
        "pubkey"
        "pin"
        "bootLoader"
      ];
    } h
    ++ requiredTyped where hh "system" isString "a string such as \"x86_64-linux\""
    ++ requiredTyped where hh "channel" isString "a string"
    ++ optionalTyped where hh "tags" u.isStringList "a list of strings"
    ++ optionalTyped where hh "pubkey" isString "a string (\"ssh-ed25519 AAAA…\") or null"
    ++ optionalTyped where hh "bootLoader" isString "a string (\"systemd-boot\", \"grub\" or \"none\") or null"
    ++ (
      if conf == null || (isAttrs conf && conf ? config) then
        [ ]
      else
        [ "${where}: configuration must be a NixOS system (what nixpkgs.lib.nixosSystem returns) or null" ]
    )
    ++ (
      if pin == null then
        [ ]
      else
        u.shapeProblems "${where}: pin" {
          required = [
            "commit"
            "reason"
          ];
          optional = [ "expiresAt" ];
        } pin
        ++ concatMap (k: requiredTyped "${where}: pin" (attrsOr pin) k isString "a string") [
          "commit"
          "reason"
        ]
        ++ optionalTyped "${where}: pin" (attrsOr pin) "expiresAt" isString "a string (RFC 3339)"
    )
  ) (attrNames inHosts);

  channelProblems = concatMap (
    name:
    let
      c = inChannels.${name};
      cc = attrsOr c;
      where = "channel ${u.q name}";
      comp = cc.compliance or null;
    in
    u.shapeProblems where {
      required = [
        "rolloutPolicy"
        "freshnessWindow"
      ];
      optional = [
        "signingIntervalMinutes"
        "reconcileIntervalMinutes"
        "compliance"
      ];
    } c
    ++ requiredTyped where cc "rolloutPolicy" isString "a string"
    ++ requiredTyped where cc "freshnessWindow" isInt "an integer (minutes)"
    ++ optionalTyped where cc "signingIntervalMinutes" isInt "an integer (minutes)"
    ++ optionalTyped where cc "reconcileIntervalMinutes" isInt "an integer (minutes)"
    ++ (
      if comp == null then
        [ ]
      else
        u.shapeProblems "${where}: compliance" {
          optional = [
            "frameworks"
            "mode"
          ];
        } comp
        ++ optionalTyped "${where}: compliance" (attrsOr comp) "frameworks" u.isStringList "a list of strings"
        ++ optionalTyped "${where}: compliance" (attrsOr comp) "mode" isString "a string"
    )
  ) (attrNames inChannels);

  policyProblems = concatMap (
    name:
    let
      p = inPolicies.${name};
      pp = attrsOr p;
      where = "rollout policy ${u.q name}";
      gate = pp.healthGate or null;
      gg = attrsOr gate;
      # A policy of strategy "all-at-once" may leave out its waves: none
      # is one wave holding every host of the channel.
      allAtOnce = (pp.strategy or null) == "all-at-once";
    in
    u.shapeProblems where {
      required = if allAtOnce then [ ] else [ "waves" ];
      optional = [
        "strategy"
        "healthGate"
        "onHealthFailure"
        "windows"
        "hostWindows"
        "reboot"
      ]
      ++ (if allAtOnce then [ "waves" ] else [ ]);
    } p
    ++ requiredTyped where pp "waves" isList "a list of { selector; soakMinutes; }"
    ++ optionalTyped where pp "strategy" isString "a string"
    ++ optionalTyped where pp "onHealthFailure" isString "a string (\"halt\" or \"rollback-and-halt\")"
    ++ u.concatImap (
      i: w:
      let
        ww = "${where} wave ${toString i}";
      in
      u.shapeProblems ww {
        required = [ "selector" ];
        optional = [
          "name"
          "soakMinutes"
          "windows"
          "approval"
          "reboot"
        ];
      } w
      ++ optionalTyped ww (attrsOr w) "name" isString "a string"
      ++ optionalTyped ww (attrsOr w) "soakMinutes" isInt "an integer (minutes)"
      ++ optionalTyped ww (attrsOr w) "reboot" isBool "a boolean (whether the control plane may reboot the wave's hosts)"
      ++ (if attrsOr w ? selector then selectorProblems "${ww} selector" w.selector else [ ])
      ++ optionalWindowsProblems ww (attrsOr w)
      ++ approvalProblems ww (attrsOr w)
    ) (listOr (pp.waves or [ ]))
    ++ optionalWindowsProblems where pp
    ++ rebootProblems where pp
    ++ optionalTyped where pp "hostWindows" isList "a list of { selector; windows; }"
    ++ u.concatImap (
      i: hw:
      let
        hwWhere = "${where} hostWindows[${toString i}]";
        hh = attrsOr hw;
      in
      u.shapeProblems hwWhere {
        required = [
          "selector"
          "windows"
        ];
      } hw
      ++ (if hh ? selector then selectorProblems "${hwWhere} selector" hh.selector else [ ])
      ++ (if hh ? windows then windowsProblems hwWhere hh.windows else [ ])
    ) (listOr (pp.hostWindows or [ ]))
    ++ (
      if gate == null then
        [ ]
      else
        u.shapeProblems "${where}: healthGate" {
          optional = [
            "systemdFailedUnits"
            "complianceProbes"
            "maxFailures"
            "minConverged"
            "minConvergedPct"
            "analysis"
          ];
        } gate
        ++ optionalTyped "${where}: healthGate" gg "maxFailures" isInt "an integer"
        ++ optionalTyped "${where}: healthGate" gg "minConverged" isInt "an integer"
        ++ optionalTyped "${where}: healthGate" gg "minConvergedPct" isInt "an integer (percent)"
        ++ (
          if (gg.systemdFailedUnits or null) == null then
            [ ]
          else
            u.shapeProblems "${where}: healthGate.systemdFailedUnits" { required = [ "max" ]; } gg.systemdFailedUnits
            ++ requiredTyped "${where}: healthGate.systemdFailedUnits" (attrsOr gg.systemdFailedUnits) "max" isInt
              "an integer"
        )
        ++ (
          if (gg.complianceProbes or null) == null then
            [ ]
          else
            u.shapeProblems "${where}: healthGate.complianceProbes" {
              required = [ "required" ];
            } gg.complianceProbes
            ++ requiredTyped "${where}: healthGate.complianceProbes" (attrsOr gg.complianceProbes) "required" isBool
              "a boolean"
        )
        ++ analysisProblems where gg
    )
  ) (attrNames inPolicies);

  edgeProblems = u.concatImap (
    i: e:
    let
      where = "edges[${toString i}]";
    in
    u.shapeProblems where {
      required = [
        "gates"
        "gated"
      ];
      optional = [ "reason" ];
    } e
    ++ concatMap (k: requiredTyped where (attrsOr e) k isString "a host name") [
      "gates"
      "gated"
    ]
    ++ optionalTyped where (attrsOr e) "reason" isString "a string"
  ) inEdges;

  # Channel edges accept the legacy spelling before (= gates) and after
  # (= gated), as the Go decoder does.
  channelEdgeEnd =
    e: name: legacy:
    let
      ee = attrsOr e;
    in
    if (ee.${name} or null) != null then ee.${name} else ee.${legacy} or null;
  channelEdgeProblems = u.concatImap (
    i: e:
    let
      where = "channelEdges[${toString i}]";
      ee = attrsOr e;
      ends = [
        {
          name = "gates";
          legacy = "before";
        }
        {
          name = "gated";
          legacy = "after";
        }
      ];
    in
    u.shapeProblems where {
      optional = [
        "gates"
        "gated"
        "before"
        "after"
        "reason"
      ];
    } e
    ++ concatMap (
      x:
      if (ee.${x.name} or null) != null && (ee.${x.legacy} or null) != null then
        [ "${where} sets both ${u.q x.name} and its legacy alias ${u.q x.legacy}" ]
      else if channelEdgeEnd e x.name x.legacy == null then
        [ "${where}: ${x.name} (or its legacy alias ${x.legacy}) is required" ]
      else if !(isString (channelEdgeEnd e x.name x.legacy)) then
        [ "${where}: ${x.name} must be a channel name" ]
      else
        [ ]
    ) ends
    ++ optionalTyped where ee "reason" isString "a string"
  ) inChannelEdges;

  budgetProblems = u.concatImap (
    i: b:
    let
      where = "disruptionBudgets[${toString i}]";
    in
    u.shapeProblems where {
      required = [ "selector" ];
      optional = [
        "name"
        "maxInFlight"
        "maxInFlightPct"
      ];
    } b
    ++ optionalTyped where (attrsOr b) "name" isString "a string"
    ++ optionalTyped where (attrsOr b) "maxInFlight" isInt "an integer or null"
    ++ optionalTyped where (attrsOr b) "maxInFlightPct" isInt "an integer (percent) or null"
    ++ (if attrsOr b ? selector then selectorProblems "${where} selector" b.selector else [ ])
  ) inBudgets;

  # A freeze's from and until must be times Go's decoder reads; the rest
  # (until after from, the reason, the channels) is the document's
  # business.
  freezeProblems = u.concatImap (
    i: f:
    let
      where = "freezes[${toString i}]";
      ff = attrsOr f;
    in
    u.shapeProblems where {
      required = [
        "from"
        "until"
        "reason"
      ];
      optional = [ "channels" ];
    } f
    ++ concatMap (
      k:
      if !(ff ? ${k}) || u.isRFC3339 ff.${k} then
        [ ]
      else if isString ff.${k} then
        [ "${where}: ${k} ${u.q ff.${k}} is not an RFC 3339 time such as \"2026-12-20T00:00:00Z\"" ]
      else
        [ "${where}: ${k} must be a string (an RFC 3339 time such as \"2026-12-20T00:00:00Z\")" ]
    ) [
      "from"
      "until"
    ]
    ++ requiredTyped where ff "reason" isString "a string"
    ++ optionalTyped where ff "channels" u.isStringList "a list of channel names"
  ) inFreezes;

  inputErrors =
    topProblems
    ++ hostProblems
    ++ channelProblems
    ++ policyProblems
    ++ edgeProblems
    ++ channelEdgeProblems
    ++ budgetProblems
    ++ freezeProblems;

  # ---- the document ----

  hosts = mapAttrs (
    name: h:
    let
      hh = attrsOr h;
      pin = attrsOr (hh.pin or null);
    in
    {
      system = stringOr null (hh.system or null);
      tags = if u.isStringList (hh.tags or null) then hh.tags else [ ];
      channel = stringOr null (hh.channel or null);
      closureHash = null;
      pubkey = stringOr null (hh.pubkey or null);
    }
    // bootLoaderOf hh
    // (
      if (hh.pin or null) == null then
        { }
      else
        {
          pin = {
            commit = stringOr "" (pin.commit or null);
            reason = stringOr "" (pin.reason or null);
          }
          // (if isString (pin.expiresAt or null) then { inherit (pin) expiresAt; } else { });
        }
    )
  ) inHosts;

  # The hosts CI builds: those with a configuration.
  configured = filter (
    name:
    let
      c = (attrsOr inHosts.${name}).configuration or null;
    in
    isAttrs c && c ? config
  ) (attrNames inHosts);

  channels = mapAttrs (
    _: c:
    let
      cc = attrsOr c;
      comp = attrsOr (cc.compliance or null);
    in
    {
      rolloutPolicy = stringOr null (cc.rolloutPolicy or null);
      freshnessWindow = intOr null (cc.freshnessWindow or null);
      signingIntervalMinutes = intOr defaults.signingIntervalMinutes (cc.signingIntervalMinutes or null);
      reconcileIntervalMinutes = intOr defaults.reconcileIntervalMinutes (cc.reconcileIntervalMinutes or null);
      compliance = {
        frameworks = if u.isStringList (comp.frameworks or null) then comp.frameworks else [ ];
        mode = stringOr defaults.complianceMode (comp.mode or null);
      };
    }
  ) inChannels;

  # Policy waves with their selectors in the internal form, for resolving.
  policyWaves = mapAttrs (
    _: p:
    map (w: {
      selector = sel.normalize ((attrsOr w).selector or { });
      soakMinutes = intOr defaults.soakMinutes ((attrsOr w).soakMinutes or null);
      name = stringOr "" ((attrsOr w).name or null);
      windows = (attrsOr w).windows or null;
      approval = (attrsOr w).approval or null;
      reboot = (attrsOr w).reboot or null;
    }) (listOr ((attrsOr p).waves or [ ]))
  ) inPolicies;

  healthGate =
    g:
    let
      gg = attrsOr g;
    in
    (if isInt (gg.maxFailures or null) then { inherit (gg) maxFailures; } else { })
    // (if isInt (gg.minConverged or null) then { inherit (gg) minConverged; } else { })
    // (if isInt (gg.minConvergedPct or null) then { inherit (gg) minConvergedPct; } else { })
    // (
      if isInt (gg.systemdFailedUnits.max or null) then
        { systemdFailedUnits.max = gg.systemdFailedUnits.max; }
      else
        { }
    )
    // (
      if isBool (gg.complianceProbes.required or null) then
        { complianceProbes.required = gg.complianceProbes.required; }
      else
        { }
    )
    # Like windows, an empty list is left out.
    // (if isList (gg.analysis or null) && gg.analysis != [ ] then { analysis = map analysisOut gg.analysis; } else { });

  # { hostWindows = [ … ]; } for a non-empty list, else nothing; the
  # selectors in the fleet.resolved form, the windows as given (an empty
  # list stays, for validation to report).
  hostWindowsOf =
    v:
    if isList v && v != [ ] then
      {
        hostWindows = map (
          hw:
          let
            hh = attrsOr hw;
          in
          {
            selector = sel.toWire hosts (sel.normalize (hh.selector or { }));
            windows = if isList (hh.windows or null) then map windowOut hh.windows else null;
          }
        ) v;
      }
    else
      { };

  rolloutPolicies = mapAttrs (
    name: p:
    {
      strategy = stringOr defaults.strategy ((attrsOr p).strategy or null);
      waves = map (
        w:
        {
          selector = sel.toWire hosts w.selector;
          inherit (w) soakMinutes;
        }
        // nameOf w.name
        // windowsOf w.windows
        // approvalOf w.approval
        // rebootOfWave w.reboot
      ) policyWaves.${name};
      healthGate = healthGate ((attrsOr p).healthGate or null);
      onHealthFailure = stringOr defaults.onHealthFailure ((attrsOr p).onHealthFailure or null);
    }
    // windowsOf ((attrsOr p).windows or null)
    // hostWindowsOf ((attrsOr p).hostWindows or null)
    // rebootOf ((attrsOr p).reboot or null)
  ) inPolicies;

  # waves.<channel>: the channel's policy waves, each resolved to the
  # channel's hosts its selector matches that no earlier wave took. Wave
  # numbers are the policy's: a wave that takes nobody stays, empty. A
  # policy without waves (strategy "all-at-once") gives an empty list: one
  # wave holding every host of the channel (rfcs/0001 §4.1). A channel
  # whose policy does not exist has no entry.
  waves = mapAttrs (
    chName: c:
    let
      members = filter (n: hosts.${n}.channel == chName) (attrNames hosts);
      pw = policyWaves.${c.rolloutPolicy};
      step =
        acc: w:
        let
          taken = filter (n: !(acc.taken ? ${n}) && sel.matches w.selector n hosts.${n}) members;
        in
        {
          taken = acc.taken // u.setOf taken;
          waves = acc.waves ++ [
            (
              {
                hosts = taken;
                inherit (w) soakMinutes;
              }
              // nameOf w.name
              // windowsOf w.windows
              // approvalOf w.approval
              // rebootOfWave w.reboot
            )
          ];
        };
    in
    (foldl' step {
      taken = { };
      waves = [ ];
    } pw).waves
  ) (filterAttrs (_: c: isString c.rolloutPolicy && policyWaves ? ${c.rolloutPolicy}) channels);

  edges = map (
    e:
    let
      ee = attrsOr e;
    in
    {
      gates = stringOr null (ee.gates or null);
      gated = stringOr null (ee.gated or null);
      reason = stringOr "" (ee.reason or null);
    }
  ) inEdges;

  channelEdges = map (e: {
    gates =
      let
        v = channelEdgeEnd e "gates" "before";
      in
      stringOr null v;
    gated =
      let
        v = channelEdgeEnd e "gated" "after";
      in
      stringOr null v;
    reason = stringOr "" ((attrsOr e).reason or null);
  }) inChannelEdges;

  disruptionBudgets = map (
    b:
    let
      bb = attrsOr b;
    in
    { selector = sel.toWire hosts (sel.normalize (bb.selector or { })); }
    // nameOf (bb.name or null)
    // (if isInt (bb.maxInFlight or null) then { inherit (bb) maxInFlight; } else { })
    // (if isInt (bb.maxInFlightPct or null) then { inherit (bb) maxInFlightPct; } else { })
  ) inBudgets;

  # Freezes as fleet.resolved carries them: `channels` left out when
  # absent or empty (every channel).
  freezes = map (
    f:
    let
      ff = attrsOr f;
    in
    {
      from = stringOr null (ff.from or null);
      until = stringOr null (ff.until or null);
      reason = stringOr null (ff.reason or null);
    }
    // (if u.isStringList (ff.channels or null) && ff.channels != [ ] then { inherit (ff) channels; } else { })
  ) inFreezes;

  doc = {
    schemaVersion = 1;
    inherit
      hosts
      channels
      rolloutPolicies
      waves
      edges
      channelEdges
      disruptionBudgets
      ;
    meta = {
      schemaVersion = 1;
      signedAt = null;
      ciCommit = null;
    };
  }
  // (if freezes != [ ] then { inherit freezes; } else { });

  checked = validate {
    inherit doc;
    built = u.setOf configured;
  };
  errors = inputErrors ++ checked.errors;
  inherit (checked) warnings;

  report =
    "nixfleet: mkFleet: the fleet has ${toString (length errors)} problem(s):\n"
    + builtins.concatStringsSep "\n" (map (e: "  - " + e) errors);
in
{
  # fleet.resolved.json, unsigned: closureHash null on every host (CI fills
  # it), meta.signedAt and meta.ciCommit null. Evaluating it throws once,
  # listing every problem, and traces every warning.
  resolved =
    if errors == [ ] then u.traceAll (map (w: "nixfleet: warning: " + w) warnings) doc else throw report;

  # What CI builds: the system toplevel of every host with a
  # configuration.
  toplevels = listToAttrs (
    map (name: {
      inherit name;
      value = inHosts.${name}.configuration.config.system.build.toplevel;
    }) configured
  );
  nixosConfigurations = listToAttrs (
    map (name: {
      inherit name;
      value = inHosts.${name}.configuration;
    }) configured
  );

  # For tools and tests: every problem (input problems first), the
  # warnings, and the document without validation.
  inherit errors inputErrors warnings;
  unchecked = doc;
}
