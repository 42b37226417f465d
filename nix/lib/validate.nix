# The validation of a fleet.resolved document, rule for rule, in the order
# and with the messages of manifest/validate.go (rfcs/0001 §3; maintenance
# windows as schedule.Check checks them, canary analyses as
# analysis.Problems does, reboot policies and boot loaders as
# validator.bootLoader does), so that the
# Nix library and the Go side report the same problems for the same fleet
# (the Go tests in nix/ compare them).
#
#   validate { doc = <fleet.resolved>; built = { <host> = true; … }; }
#     == { errors = [ … ]; warnings = [ … ]; }
#
# At evaluation time no host has a closureHash yet: `built` names the hosts
# CI will build (those with a configuration), which the Go side sees as the
# hosts that have a closureHash.
#
# Every check tolerates members of the wrong type (mkFleet reports those as
# input problems), so that one evaluation reports everything.
let
  u = import ./util.nix;
  sel = import ./selectors.nix;
  inherit (builtins)
    attrNames
    concatMap
    concatStringsSep
    elem
    filter
    foldl'
    genList
    isAttrs
    isBool
    isInt
    isList
    isString
    length
    mapAttrs
    match
    sort
    stringLength
    ;

  # trust.MaxWindowMinutes: 366 days.
  maxWindowMinutes = 527040;
  # manifest.TightBudgetHosts.
  tightBudgetHosts = 10;

  validHostname =
    s: isString s && stringLength s <= 253 && match "[A-Za-z0-9][A-Za-z0-9._-]*" s != null;
  validChannelName =
    s:
    match "[A-Za-z0-9][A-Za-z0-9_-]*([.][A-Za-z0-9_-]+)*" s != null
    && match ".*[.]lock" s == null;
  validClosure = s: match "[0123456789abcdfghijklmnpqrsvwxyz]{32}-[A-Za-z0-9+._?=-]+" s != null;
  # An OpenSSH ed25519 public key: the base64 blob is string("ssh-ed25519")
  # then string(32 bytes), 51 bytes, so 68 characters with a fixed prefix.
  validPubkey =
    s:
    isString s
    && match "[[:space:]]*ssh-ed25519[[:space:]]+AAAAC3NzaC1lZDI1NTE5AAAAI[A-P][A-Za-z0-9+/]{42}([[:space:]].*)?" s
      != null;
  validCommit = s: isString s && match "[0-9a-f]{7,64}" s != null;
  # manifest.MaxLabelLen and labelRE: the names of budgets and waves.
  maxLabelLen = 40;
  validLabel =
    s: isString s && stringLength s <= maxLabelLen && match "[A-Za-z0-9][A-Za-z0-9._-]*" s != null;
  # A name member: absent, null, "" and values of another type (an input
  # problem of mkFleet) all mean none.
  nameOf = v: if isString (v.name or null) then v.name else "";
  labelErrors =
    where: n:
    if n == "" || validLabel n then
      [ ]
    else
      [
        "${where}: name ${u.q n} must be letters, digits, '.', '_' or '-', at most ${toString maxLabelLen} long"
      ];

  # proto.Selector.Normalized, in the wire form: sorted, de-duplicated
  # lists and no empty members.
  normalSelector =
    s:
    let
      ss = if isAttrs s then s else { };
      list = k: if u.isStringList (ss.${k} or null) then u.sortUnique ss.${k} else [ ];
    in
    {
      all = (ss.all or false) == true;
      channel = if isString (ss.channel or null) && ss.channel != "" then ss.channel else null;
      hosts = list "hosts";
      tags = list "tags";
      tagsAny = list "tagsAny";
    };
  # proto.Selector.Short: "tags=web", "hosts=a,b,c,+2", "all", "none", …,
  # cut at 48 bytes with "…" (the Go side cuts at a character boundary;
  # the two agree on ASCII names).
  shortSelector =
    s:
    let
      n = normalSelector s;
      list =
        k: l:
        let
          shown = builtins.genList (builtins.elemAt l) (if length l < 3 then length l else 3);
          more = length l - length shown;
        in
        if l == [ ] then
          [ ]
        else
          [ "${k}=${builtins.concatStringsSep "," shown}${if more > 0 then ",+${toString more}" else ""}" ];
      rules =
        (if n.all then [ "all" ] else [ ])
        ++ (if n.channel != null then [ "channel=${n.channel}" ] else [ ])
        ++ list "hosts" n.hosts
        ++ list "tags" n.tags
        ++ list "tagsAny" n.tagsAny;
      out = builtins.concatStringsSep ";" rules;
    in
    if rules == [ ] then
      "none"
    else if stringLength out > 48 then
      builtins.substring 0 48 out + "…"
    else
      out;

  usesCombinators = s: isAttrs s && ((s.and or [ ]) != [ ] || (s.not or null) != null);

  # One cycle of the directed graph (a list of [from to] pairs) as a closed
  # path, or null: the depth-first search of manifest.findCycle, with nodes
  # and successors visited in sorted order, so both find the same cycle.
  findCycle =
    edges:
    let
      adj = mapAttrs (_: next: sort (a: b: a < b) next) (
        foldl' (
          acc: e:
          let
            from = builtins.elemAt e 0;
          in
          acc // { ${from} = (acc.${from} or [ ]) ++ [ (builtins.elemAt e 1) ]; }
        ) { } edges
      );
      # visit returns { state; cycle; }; state maps a node to "onPath" or
      # "done".
      visit =
        path: state: n:
        let
          here = path ++ [ n ];
          step =
            acc: m:
            if acc.cycle != null then
              acc
            else
              let
                s = acc.state.${m} or "unvisited";
              in
              if s == "onPath" then
                acc // { cycle = u.dropUntil m here ++ [ m ]; }
              else if s == "unvisited" then
                visit here acc.state m
              else
                acc;
          r = foldl' step {
            state = state // { ${n} = "onPath"; };
            cycle = null;
          } (adj.${n} or [ ]);
        in
        if r.cycle != null then
          r
        else
          {
            state = r.state // { ${n} = "done"; };
            cycle = null;
          };
    in
    (foldl' (
      acc: n: if acc.cycle != null || acc.state ? ${n} then acc else visit [ ] acc.state n
    ) { state = { }; cycle = null; } (attrNames adj)).cycle;

  cycleText = c: builtins.concatStringsSep " -> " c;

  listOf = v: if isList v then v else [ ];
  # The first i members of l.
  take = i: l: genList (builtins.elemAt l) i;

  # schedule.Days and schedule.MaxDurationMinutes (a week).
  weekDays = [
    "mon"
    "tue"
    "wed"
    "thu"
    "fri"
    "sat"
    "sun"
  ];
  maxDurationMinutes = 10080;
  # What an IANA time zone name looks like ("UTC", "Europe/Berlin",
  # "America/Argentina/Buenos_Aires", "Etc/GMT+5"). Nix has no zone
  # database: a name of this shape that names no zone is left to the Go
  # side, which has one. Every name that fails it names no zone, so the
  # message is Go's.
  zoneShaped = s: match "[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*" s != null;

  # schedule.Check: the problems of one maintenance window, in its order.
  # Members of the wrong type (input problems of mkFleet) are not checked.
  windowProblems =
    w:
    let
      days = w.days or null;
      start = w.start or null;
      duration = w.durationMinutes or null;
      zone = w.timeZone or null;
    in
    (if days == [ ] then [ "days is empty" ] else [ ])
    ++ u.concatImap (
      i: d:
      if !(elem d weekDays) then
        [ "day ${u.q d} is not one of ${concatStringsSep ", " weekDays}" ]
      else if elem d (take i days) then
        [ "day ${u.q d} is listed twice" ]
      else
        [ ]
    ) (listOf days)
    ++ (
      if !(isString start) then
        [ ]
      else if stringLength start != 5 || builtins.substring 2 1 start != ":" then
        [ "start ${u.q start} is not HH:MM" ]
      else if match "([01][0-9]|2[0-3]):[0-5][0-9]" start == null then
        [ "start ${u.q start} is not a time of day HH:MM (00:00 to 23:59)" ]
      else
        [ ]
    )
    ++ (
      if isInt duration && (duration < 1 || duration > maxDurationMinutes) then
        [ "durationMinutes ${toString duration} must be between 1 and ${toString maxDurationMinutes}" ]
      else
        [ ]
    )
    ++ (
      if !(isString zone) then
        [ ]
      else if zone == "" || zone == "Local" then
        [ "time zone ${u.q zone}: name an IANA zone, like Europe/Berlin or UTC" ]
      else if !(zoneShaped zone) then
        [ "time zone ${u.q zone} is not in the IANA database" ]
      else
        [ ]
    );

  # manifest's validator.windows: one error per bad window of the list ws
  # (of `where`), its problems joined with "; ".
  windowErrors =
    where: ws:
    u.concatImap (
      i: w:
      let
        ps = windowProblems w;
      in
      if ps == [ ] then [ ] else [ "${where}: windows[${toString i}]: ${concatStringsSep "; " ps}" ]
    ) (listOf ws);

  # manifest's validator.approval: the problems of a wave's approval gate
  # a (of `where`), at most 100 approvers, and approvers only with
  # required = true. approvers 0 is none, as for Go, whose int cannot tell
  # them apart (mkFleet refuses a given 0 as an input problem); members of
  # the wrong type (input problems) are not checked.
  maxApprovers = 100;
  approvalErrors =
    where: a:
    let
      n = a.approvers or 0;
    in
    if !(isAttrs a) then
      [ ]
    else
      (
        if isInt n && (n < 0 || n > maxApprovers) then
          [ "${where}: approval.approvers ${toString n} must be between 1 and ${toString maxApprovers}" ]
        else
          [ ]
      )
      ++ (
        if (a.required or null) == false && isInt n && n != 0 then
          [ "${where}: approval.approvers without approval.required = true" ]
        else
          [ ]
      );

  # analysis.Problems (rfcs/0001 §2.3): the problems of one canary
  # analysis besides its name, in its order, without its place in the
  # fleet. Members of the wrong type (input problems of mkFleet) are not
  # checked. Go's regular expressions read the same in POSIX ERE; match
  # anchors them, and a query's placeholders are found as Go finds them
  # (their matches cannot overlap, and each match starting at a given
  # place has one length).
  maxQueryBytes = 4096; # analysis.MaxQueryBytes
  maxAnalysisCount = 1000; # proto.MaxAnalysisCount
  maxIntervalSeconds = 86400; # analysis.MaxInterval
  placeholders = [
    "HostsRegex"
    "RolloutID"
    "Channel"
    "Wave"
  ];
  placeholderRE = "[{][{] *[.]([A-Za-z]+) *[}][}]";
  # analysis's number: a decimal number of at most 15 digits before and
  # after the point and an exponent of at most two.
  numberRE = "-?([0-9]{1,15}([.][0-9]{0,15})?|[.][0-9]{1,15})([eE][+-]?[0-9]{1,2})?";
  conditionRE = " *result *(<=|>=|==|!=|<|>) *(${numberRE}) *";
  intervalRE = "([1-9][0-9]{0,5})(s|m|h)";
  # proto.ValidSourceName: a Prometheus source of the control plane.
  sourceRE = "[a-z0-9][a-z0-9_-]{0,62}";
  intervalUnits = {
    s = 1;
    m = 60;
    h = 3600;
  };
  # Unknown placeholders, each once in the order they first appear, then
  # braces left once every placeholder is taken out.
  queryProblems =
    q:
    let
      parts = builtins.split placeholderRE q;
      names = concatMap (p: if isList p then p else [ ]) parts;
      rest = concatStringsSep "" (filter isString parts);
      unknown = foldl' (acc: n: if elem n placeholders || elem n acc then acc else acc ++ [ n ]) [ ] names;
    in
    map (n: "query: {{ .${n} }} is not a placeholder (known: ${known})") unknown
    ++ (
      if length (builtins.split "[{][{]|[}][}]" rest) > 1 then
        [ "query: \"{{\" or \"}}\" outside a placeholder" ]
      else
        [ ]
    );
  known = concatStringsSep ", " (map (p: "." + p) placeholders);
  conditionProblems =
    member: c:
    if match conditionRE c != null then
      [ ]
    else
      [ "${member} ${u.q c} is not \"result <op> <number>\" with <op> one of <, <=, >, >=, ==, !=" ];
  intervalProblems =
    s:
    let
      m = match intervalRE s;
    in
    if m == null then
      [ "interval ${u.q s} is not a whole number of seconds, minutes or hours like \"30s\", \"5m\" or \"1h\"" ]
    else if intervalSeconds m > maxIntervalSeconds then
      [ "interval ${u.q s} is longer than 24h" ]
    else
      [ ];
  # The seconds of an interval, from its match of intervalRE.
  intervalSeconds = m: builtins.fromJSON (builtins.head m) * intervalUnits.${builtins.elemAt m 1};
  # The value of a number (numberRE), as Go's strconv.ParseFloat reads it
  # (fromJSON's floats are doubles, rounded as Go rounds them), or null
  # when s is not one. JSON has no leading zeros and no bare point: the
  # integer part loses its zeros ("0" when none is left) and a fraction
  # its point when it has no digits.
  numberValue =
    s:
    let
      m = match "(-?)0*([1-9][0-9]*)?([.]([0-9]*))?([eE].*)?" s;
      at = builtins.elemAt m;
      int = if at 1 == null then "0" else at 1;
      frac = if at 3 == null || at 3 == "" then "" else "." + at 3;
      exp = if at 4 == null then "" else at 4;
    in
    if match numberRE s == null then null else builtins.fromJSON (at 0 + int + frac + exp);
  # proto.Comparison's bounds.
  minComparisonSamples = 3; # proto.MinComparisonSamples
  maxComparisonSamples = 10000; # proto.MaxComparisonSamples
  maxComparisonPoints = 1000; # proto.MaxComparisonPoints
  maxBaselineTags = 8; # proto.MaxBaselineTags
  # analysis.comparisonProblems: the problems of the comparison c of an
  # analysis with the query `query`, and of its query for a comparison
  # (an empty one has been reported).
  comparisonProblems =
    c: query:
    let
      confidence = c.confidence or null;
      effect = c.effect or null;
      minSamples = c.minSamples or null;
      step = c.step or null;
      window = c.window or null;
      worse = c.worse or null;
      baselineTags = c.baselineTags or null;
      confidenceValue = numberValue confidence;
      effectValue = numberValue effect;
      stepM = if isString step then match intervalRE step else null;
      windowM = if isString window then match intervalRE window else null;
      stepProblems = if isString step then intervalProblems step else [ ];
      windowProblems = if isString window then intervalProblems window else [ ];
      names = concatMap (p: if isList p then p else [ ]) (builtins.split placeholderRE query);
    in
    (
      if isString confidence && (confidenceValue == null || confidenceValue < 0.5 || confidenceValue > 0.999) then
        [ "compare.confidence ${u.q confidence} must be a decimal number from 0.5 to 0.999" ]
      else
        [ ]
    )
    ++ (
      if isString effect && (effectValue == null || effectValue < 0) then
        [ "compare.effect ${u.q effect} must be a decimal number of at least 0" ]
      else
        [ ]
    )
    ++ (
      if isInt minSamples && (minSamples < minComparisonSamples || minSamples > maxComparisonSamples) then
        [
          "compare.minSamples ${toString minSamples} must be between ${toString minComparisonSamples} and ${toString maxComparisonSamples}"
        ]
      else
        [ ]
    )
    ++ map (p: "compare.step: ${p}") stepProblems
    ++ map (p: "compare.window: ${p}") windowProblems
    ++ (
      if stepM == null || windowM == null || stepProblems != [ ] || windowProblems != [ ] then
        [ ]
      else if intervalSeconds stepM > intervalSeconds windowM then
        [ "compare.step ${step} is longer than compare.window ${window}" ]
      else if intervalSeconds windowM > maxComparisonPoints * intervalSeconds stepM then
        [ "compare.window ${window} is more than ${toString maxComparisonPoints} steps of ${step}" ]
      else
        [ ]
    )
    ++ (
      if isString worse && worse != "higher" && worse != "lower" then
        [ "compare.worse ${u.q worse} must be \"higher\" or \"lower\"" ]
      else
        [ ]
    )
    ++ (
      if isList baselineTags && builtins.length baselineTags > maxBaselineTags then
        [
          "compare.baselineTags has ${toString (builtins.length baselineTags)} tags, at most ${toString maxBaselineTags}"
        ]
      else
        [ ]
    )
    ++ (
      if isList baselineTags then
        u.concatImap (i: tag: if tag == "" then [ "compare.baselineTags[${toString i}] is empty" ] else [ ]) baselineTags
      else
        [ ]
    )
    ++ (
      if isString query && query != "" && !(elem "HostsRegex" names) then
        [ "compare: the query must select hosts by {{ .HostsRegex }}, which stands for each group's hosts" ]
      else
        [ ]
    );
  analysisProblems =
    a:
    let
      query = a.query or null;
      success = a.successCondition or null;
      failure = a.failureCondition or null;
      interval = a.interval or null;
      n = a.count or null;
      failureLimit = a.failureLimit or null;
      inconclusiveLimit = a.inconclusiveLimit or null;
      source = a.source or null;
      compare = a.compare or null;
    in
    (
      if !(isString query) then
        [ ]
      else if query == "" then
        [ "query is empty" ]
      else if stringLength query > maxQueryBytes then
        [ "query is ${toString (stringLength query)} bytes, more than ${toString maxQueryBytes}" ]
      else
        queryProblems query
    )
    ++ (if isString success then conditionProblems "successCondition" success else [ ])
    ++ (if isString failure && failure != "" then conditionProblems "failureCondition" failure else [ ])
    ++ (if isString interval then intervalProblems interval else [ ])
    ++ (
      if isInt n && (n < 1 || n > maxAnalysisCount) then
        [ "count ${toString n} must be between 1 and ${toString maxAnalysisCount}" ]
      else
        [ ]
    )
    ++ (
      if isInt failureLimit && failureLimit < 0 then
        [ "failureLimit ${toString failureLimit} is negative" ]
      else
        [ ]
    )
    ++ (
      if isInt inconclusiveLimit && inconclusiveLimit < 0 then
        [ "inconclusiveLimit ${toString inconclusiveLimit} is negative" ]
      else
        [ ]
    )
    ++ (
      if !(isString source) || source == "" then
        [ ]
      else if source == "default" then
        [
          "source ${u.q source} is reserved: leave source out to query the control plane's default Prometheus"
        ]
      else if match sourceRE source == null then
        [ "source ${u.q source} must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit" ]
      else
        [ ]
    )
    ++ (if isAttrs compare then comparisonProblems compare query else [ ]);

  # manifest's validator.analyses: each analysis of the gate of policy
  # has a name, a label unique in the gate (an earlier analysis whose name
  # is malformed takes none), then analysis.Problems. A name of the wrong
  # type (an input problem) is not checked.
  analysisErrors =
    policy: as:
    let
      list = listOf as;
      nameAt =
        j:
        let
          x = builtins.elemAt list j;
        in
        if isAttrs x then x.name or null else null;
    in
    u.concatImap (
      i: a0:
      let
        a = if isAttrs a0 then a0 else { };
        where = "rollout policy ${u.q policy}: healthGate.analysis[${toString i}]";
        n = a.name or null;
        first = foldl' (acc: j: if acc == null && nameAt j == n then j else acc) null (genList (j: j) i);
      in
      (
        if !(isString n) then
          [ ]
        else if n == "" then
          [ "${where}: name is empty" ]
        else if labelErrors where n != [ ] then
          labelErrors where n
        else if first != null then
          [ "${where}: name ${u.q n} is already analysis[${toString first}]'s" ]
        else
          [ ]
      )
      ++ map (p: "${where}: ${p}") (analysisProblems a)
    ) list;

  # The boot loaders a host may declare (manifest's bootLoaders), those a
  # reboot policy supports (proto.BootLoaders), and
  # manifest.MaxBootTimeoutMinutes.
  bootLoaders = [
    "systemd-boot"
    "grub"
    "none"
  ];
  rebootLoaders = [
    "systemd-boot"
    "grub"
  ];
  maxBootTimeoutMinutes = 1440;
  # proto.RolloutPolicy.RebootAllowed: whether the control plane may
  # reboot the hosts of wave i of policy p, by the wave's own reboot, else
  # the policy's. A reboot of the wrong type (an input problem) is none.
  rebootAllowed =
    p: i:
    let
      ws = listOf (p.waves or null);
      w = if i < length ws then builtins.elemAt ws i else { };
      own = if isAttrs w then w.reboot or null else null;
      r = p.reboot or null;
    in
    if isBool own then own && isAttrs r else isAttrs r && (r.allowed or null) == true;
  # manifest's rebootsAnyWave: a policy without waves rolls out in one.
  rebootsAnyWave =
    p:
    let
      n = length (listOf (p.waves or null));
    in
    builtins.any (rebootAllowed p) (genList (i: i) (if n > 1 then n else 1));

  # manifest.MaxFreezeReasonLen, in bytes.
  maxFreezeReasonLen = 200;
  # The date and time of an RFC 3339 time in UTC ("…T00:00:00Z", with or
  # without fractional seconds), without the fraction (as Go prints it);
  # null for any other form.
  zuluSeconds =
    s:
    let
      m = if isString s then match "([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})([.][0-9]+)?Z" s else null;
    in
    if m == null then null else builtins.head m + "Z";
in
{
  doc,
  built ? { },
}:
let
  hosts = if isAttrs (doc.hosts or null) then doc.hosts else { };
  channels = if isAttrs (doc.channels or null) then doc.channels else { };
  policies = if isAttrs (doc.rolloutPolicies or null) then doc.rolloutPolicies else { };
  waves = if isAttrs (doc.waves or null) then doc.waves else { };
  listOr = v: if isList v then v else [ ];
  edges = listOr (doc.edges or [ ]);
  channelEdges = listOr (doc.channelEdges or [ ]);
  budgets = listOr (doc.disruptionBudgets or [ ]);
  freezes = listOr (doc.freezes or [ ]);

  # Hosts in the form selectors match against.
  matchable = mapAttrs (_: h: {
    tags = if u.isStringList (h.tags or null) then h.tags else [ ];
    channel = h.channel or null;
  }) hosts;
  count = s: length (sel.select matchable (sel.normalize s));

  hasClosure = name: built ? ${name} || (hosts.${name}.closureHash or null) != null;
  channelOf = name: hosts.${name}.channel or null;
  knownChannel = c: isString c && channels ? ${c};

  header =
    (if (doc.schemaVersion or null) != 1 then [ "schemaVersion is ${builtins.toJSON (doc.schemaVersion or null)}, want 1" ] else [ ])
    ++ (
      let
        c = doc.meta.ciCommit or null;
      in
      if c != null && !(validCommit c) then [ "meta.ciCommit ${u.q c} is not a hex commit id" ] else [ ]
    );

  hostChecks = map (
    name:
    let
      h = hosts.${name};
      where = "host ${u.q name}";
      ch = h.channel or null;
      closure = h.closureHash or null;
      pubkey = h.pubkey or null;
    in
    {
      errors =
        (if validHostname name then [ ] else [ "${where}: name must be letters, digits, '.', '_' or '-'" ])
        ++ (if !(isString ch) || knownChannel ch then [ ] else [ "${where}: channel ${u.q ch} does not exist" ])
        ++ (
          if closure == null || !(isString closure) || validClosure closure then
            [ ]
          else
            [ "${where}: closureHash ${u.q closure} is not a Nix store path basename" ]
        )
        ++ (
          if pubkey == null || validPubkey pubkey then
            [ ]
          else
            [ "${where}: pubkey: ${u.q pubkey} is not an OpenSSH ssh-ed25519 public key" ]
        )
        ++ bootLoaderErrors where h;
      warnings =
        if hasClosure name then
          [ ]
        else
          [ "${where} has no configuration, so CI builds no closure for it; it is not part of any rollout" ];
    }
  ) (attrNames hosts);

  # manifest's validator.bootLoader: the declared boot loader of the host h
  # (of `where`) is a known one, and one that can boot once into an entry
  # when its channel's policy reboots any wave. None declared (absent,
  # null or "", Go's omitempty) and one of the wrong type (an input
  # problem) are not checked.
  bootLoaderErrors =
    where: h:
    let
      l = h.bootLoader or null;
      ch = h.channel or null;
      policy = if knownChannel ch then channels.${ch}.rolloutPolicy or null else null;
    in
    if !(isString l) || l == "" then
      [ ]
    else if !(elem l bootLoaders) then
      [ "${where}: bootLoader ${u.q l} is not systemd-boot, grub or none" ]
    else if elem l rebootLoaders || !(isString policy) || !(policies ? ${policy}) then
      [ ]
    else if rebootsAnyWave policies.${policy} then
      [
        "${where}: channel ${u.q ch} lets the control plane reboot hosts (rollout policy ${u.q policy}), but bootLoader ${u.q l} cannot boot once into an entry; only systemd-boot and grub can"
      ]
    else
      [ ];

  channelErrors =
    (if channels == { } then [ "the fleet declares no channel" ] else [ ])
    ++ concatMap (
      name:
      let
        c = channels.${name};
        where = "channel ${u.q name}";
        policy = c.rolloutPolicy or null;
        fw = c.freshnessWindow or null;
        si = c.signingIntervalMinutes or 0;
        mode = c.compliance.mode or "";
      in
      (
        if validChannelName name then
          [ ]
        else
          [ "${where}: name must be letters, digits, '_', '-' and single inner dots (it becomes a git ref)" ]
      )
      ++ (
        if !(isString policy) || policies ? ${policy} then
          [ ]
        else
          [ "${where}: rollout policy ${u.q policy} does not exist" ]
      )
      ++ (
        if !(isInt fw) || !(isInt si) then
          [ ]
        else if fw <= 0 || fw > maxWindowMinutes then
          [ "${where}: freshnessWindow ${toString fw} must be between 1 and ${toString maxWindowMinutes} minutes" ]
        else if si < 0 then
          [ "${where}: signingIntervalMinutes ${toString si} is negative" ]
        else if fw < 2 * si then
          [
            "${where}: freshnessWindow (${toString fw}) must be >= 2 × signingIntervalMinutes (${toString si}), so one missed signing run does not strand hosts"
          ]
        else
          [ ]
      )
      ++ (
        if
          !(isString mode)
          || elem mode [
            ""
            "disabled"
            "permissive"
            "enforce"
          ]
        then
          [ ]
        else
          [ "${where}: compliance.mode ${u.q mode} is not disabled, permissive or enforce" ]
      )
    ) (attrNames channels);

  policyChecks = concatMap (
    name:
    let
      p = policies.${name};
      onFailure = p.onHealthFailure or "";
      gate = if isAttrs (p.healthGate or null) then p.healthGate else { };
      maxFailures = gate.maxFailures or null;
      unitsMax = gate.systemdFailedUnits.max or null;
      minConverged = gate.minConverged or null;
      minConvergedPct = gate.minConvergedPct or null;
      waveChecks = u.concatImap (
        i: w:
        let
          where = "rollout policy ${u.q name} wave ${toString i}";
          s = w.selector or { };
          soak = w.soakMinutes or 0;
          wn = nameOf w;
          # The first wave of the policy with this name.
          firstNamed = foldl' (
            acc: j: if acc == null && nameOf (builtins.elemAt (listOr p.waves) j) == wn then j else acc
          ) null (builtins.genList (j: j) i);
        in
        [
          {
            errors =
              labelErrors where wn
              ++ (
                if wn != "" && validLabel wn && firstNamed != null then
                  [ "${where}: name ${u.q wn} is already wave ${toString firstNamed}'s" ]
                else
                  [ ]
              )
              ++ (
                if usesCombinators s then
                  [
                    "${where}: selector uses \"and\"/\"not\", which are resolved at evaluation time and have no meaning in fleet.resolved"
                  ]
                else
                  [ ]
              )
              ++ (if isInt soak && soak < 0 then [ "${where}: soakMinutes ${toString soak} is negative" ] else [ ])
              ++ windowErrors where (w.windows or null)
              ++ approvalErrors where (w.approval or null)
              ++ (
                if (w.reboot or null) == true && !(isAttrs (p.reboot or null)) then
                  [ "${where}: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes" ]
                else
                  [ ]
              );
            warnings = if !(usesCombinators s) && count s == 0 then [ "${where}: selector matches no host" ] else [ ];
          }
        ]
      ) (listOr (p.waves or [ ]));
      # The policy's windows, then each host selector's: its selector as
      # a budget's is checked, and at least one window.
      hostWindowChecks = u.imap (
        i: hw:
        let
          where = "rollout policy ${u.q name} hostWindows[${toString i}]";
          s = hw.selector or { };
        in
        {
          errors =
            (
              if usesCombinators s then
                [
                  "${where}: selector uses \"and\"/\"not\", which are resolved at evaluation time and have no meaning in fleet.resolved"
                ]
              else
                [ ]
            )
            ++ (if (hw.windows or [ ]) == [ ] then [ "${where}: windows is empty" ] else [ ])
            ++ windowErrors where (hw.windows or null);
          warnings = if !(usesCombinators s) && count s == 0 then [ "${where}: selector matches no host" ] else [ ];
        }
      ) (listOr (p.hostWindows or [ ]));
    in
    [
      {
        errors =
          (
            if
              elem onFailure [
                "halt"
                "rollback-and-halt"
              ]
            then
              [ ]
            else
              [ "rollout policy ${u.q name}: onHealthFailure ${u.q onFailure} is not halt or rollback-and-halt" ]
          )
          ++ concatMap (c: c.errors) waveChecks
          ++ windowErrors "rollout policy ${u.q name}" (p.windows or null)
          ++ concatMap (c: c.errors) hostWindowChecks
          ++ (
            if isInt maxFailures && maxFailures < 0 then
              [ "rollout policy ${u.q name}: healthGate.maxFailures ${toString maxFailures} is negative" ]
            else
              [ ]
          )
          ++ (
            if isInt unitsMax && unitsMax < 0 then
              [ "rollout policy ${u.q name}: healthGate.systemdFailedUnits.max ${toString unitsMax} is negative" ]
            else
              [ ]
          )
          ++ (
            if isInt minConverged && minConverged < 1 then
              [ "rollout policy ${u.q name}: healthGate.minConverged ${toString minConverged} must be at least 1" ]
            else
              [ ]
          )
          ++ (
            if isInt minConvergedPct && (minConvergedPct < 1 || minConvergedPct > 100) then
              [
                "rollout policy ${u.q name}: healthGate.minConvergedPct ${toString minConvergedPct} must be between 1 and 100"
              ]
            else
              [ ]
          )
          ++ analysisErrors name (gate.analysis or null)
          ++ (
            let
              t = p.reboot.bootTimeoutMinutes or null;
            in
            if isAttrs (p.reboot or null) && isInt t && (t < 1 || t > maxBootTimeoutMinutes) then
              [
                "rollout policy ${u.q name}: reboot.bootTimeoutMinutes ${toString t} must be between 1 and ${toString maxBootTimeoutMinutes}"
              ]
            else
              [ ]
          );
        warnings = concatMap (c: c.warnings) waveChecks ++ concatMap (c: c.warnings) hostWindowChecks;
      }
    ]
  ) (attrNames policies);

  # firstWave.<channel>.<host>: the index of the first wave of
  # waves.<channel> that lists the host (manifest.firstWaves); a host no
  # wave of the channel lists is absent. listToAttrs keeps the first of
  # duplicate names. An empty list (not null: manifest.AllAtOnce) is a
  # channel rolled out all at once: every host of the channel is in wave 0.
  firstWave = mapAttrs (
    ch: ws:
    builtins.listToAttrs (
      if ws == [ ] then
        map (h: {
          name = h;
          value = 0;
        }) (filter (h: channelOf h == ch) (attrNames hosts))
      else
        u.concatImap (
          i: w:
          map (h: {
            name = h;
            value = i;
          }) (if u.isStringList (w.hosts or null) then w.hosts else [ ])
        ) (listOr ws)
    )
  ) waves;

  waveErrors =
    concatMap (
      ch:
      (if channels ? ${ch} then [ ] else [ "waves: channel ${u.q ch} does not exist" ])
      ++ u.concatImap (
        i: w:
        let
          where = "waves.${ch}[${toString i}]";
          soak = w.soakMinutes or 0;
        in
        labelErrors where (nameOf w)
        ++ windowErrors where (w.windows or null)
        ++ approvalErrors where (w.approval or null)
        ++ (
          let
            policy = if channels ? ${ch} then channels.${ch}.rolloutPolicy or null else null;
          in
          if
            (w.reboot or null) == true
            && isString policy
            && policies ? ${policy}
            && !(isAttrs (policies.${policy}.reboot or null))
          then
            [ "${where}: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes" ]
          else
            [ ]
        )
        ++ (if isInt soak && soak < 0 then [ "${where}: soakMinutes ${toString soak} is negative" ] else [ ])
        ++ map (h: "${where}: host ${u.q h} does not exist") (
          filter (h: !(hosts ? ${h})) (if u.isStringList (w.hosts or null) then w.hosts else [ ])
        )
      ) (listOr waves.${ch})
    ) (attrNames waves)
    ++ concatMap (
      name:
      let
        ch = channelOf name;
      in
      if hasClosure name && knownChannel ch && !((firstWave.${ch} or { }) ? ${name}) then
        [ "host ${u.q name}: no wave of channel ${u.q ch} lists it, so it would never be rolled out" ]
      else
        [ ]
    ) (attrNames hosts);

  # Host edges and channel edges differ only in what they name and in the
  # rules a well-formed edge must also pass: `extra` (errors that keep the
  # edge out of the cycle search: the same-channel rule) and `order`
  # (errors on an edge that still takes part in it: the wave order).
  edgeChecks =
    {
      field,
      kind,
      known,
      extra,
      order,
    }:
    list:
    let
      each = u.imap (
        i: e:
        let
          where = "${field}[${toString i}]";
          a = e.gates or null;
          b = e.gated or null;
        in
        if !(isString a) || !(isString b) then
          { errors = [ ]; }
        else if !(known ? ${a}) then
          { errors = [ "${where}: gates ${kind} ${u.q a} does not exist" ]; }
        else if !(known ? ${b}) then
          { errors = [ "${where}: gated ${kind} ${u.q b} does not exist" ]; }
        else if a == b then
          { errors = [ "${where}: ${kind} ${u.q a} gates itself" ]; }
        else
          let
            x = extra where a b;
          in
          if x != [ ] then
            { errors = x; }
          else
            {
              errors = order where a b;
              edge = [
                a
                b
              ];
            }
      ) list;
      cycle = findCycle (concatMap (r: if r ? edge then [ r.edge ] else [ ]) each);
    in
    concatMap (r: r.errors) each ++ (if cycle == null then [ ] else [ "${field} form a cycle: ${cycleText cycle}" ]);

  hostEdgeErrors = edgeChecks {
    field = "edges";
    kind = "host";
    known = hosts;
    extra =
      where: a: b:
      let
        ca = channelOf a;
        cb = channelOf b;
      in
      if ca == cb then
        [ ]
      else
        [
          "${where}: ${u.q a} (channel ${u.q ca}) and ${u.q b} (channel ${u.q cb}) are on different channels; use channelEdges to order channels"
        ];
    # A host may only wait for hosts of its own or an earlier wave of its
    # channel; hosts no wave lists are not checked.
    order =
      where: a: b:
      let
        ch = channelOf a;
        first = if isString ch then firstWave.${ch} or { } else { };
      in
      if first ? ${a} && first ? ${b} && first.${a} > first.${b} then
        [
          "${where}: ${u.q a} (wave ${toString first.${a}} of channel ${u.q ch}) gates ${u.q b} (wave ${toString first.${b}}), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave"
        ]
      else
        [ ];
  } edges;

  channelEdgeErrors = edgeChecks {
    field = "channelEdges";
    kind = "channel";
    known = channels;
    extra =
      where: a: b:
      [ ];
    order =
      where: a: b:
      [ ];
  } channelEdges;

  # Budgets are told apart by their labels (manifest's budgetNames): a name
  # is well-formed and no other budget is called the same; unnamed budgets
  # of different selectors whose short forms coincide draw a warning.
  budgetNames =
    (foldl' (
      acc: i:
      let
        b = builtins.elemAt budgets i;
        where = "disruptionBudgets[${toString i}]";
        n = nameOf b;
        label = if n != "" then n else shortSelector (b.selector or { });
        j = acc.first.${label} or null;
        o = builtins.elemAt budgets j;
      in
      if labelErrors where n != [ ] then
        acc // { errors = acc.errors ++ labelErrors where n; }
      else if j == null then
        acc // { first = acc.first // { ${label} = i; }; }
      else if n != "" || nameOf o != "" then
        acc
        // {
          errors = acc.errors ++ [
            "${where}: is called ${u.q label}, like disruptionBudgets[${toString j}]; budget names must be unique"
          ];
        }
      else if normalSelector (b.selector or { }) != normalSelector (o.selector or { }) then
        acc
        // {
          warnings = acc.warnings ++ [
            "${where}: is called ${u.q label}, like disruptionBudgets[${toString j}]; give them names"
          ];
        }
      else
        acc
    ) {
      first = { };
      errors = [ ];
      warnings = [ ];
    } (builtins.genList (i: i) (length budgets)));

  budgetChecks = u.imap (
    i: b:
    let
      where = "disruptionBudgets[${toString i}]";
      s = b.selector or { };
      n = count s;
      m = b.maxInFlight or null;
      p = b.maxInFlightPct or null;
      mErrors = if isInt m && m <= 0 then [ "${where}: maxInFlight ${toString m} can never admit a host" ] else [ ];
      pErrors =
        if !(isInt p) then
          [ ]
        else if p <= 0 || p > 100 then
          [ "${where}: maxInFlightPct ${toString p} must be between 1 and 100" ]
        else if n > 0 && n * p / 100 == 0 then
          [
            "${where}: maxInFlightPct ${toString p} of ${toString n} hosts rounds down to 0 and can never admit a host"
          ]
        else
          [ ];
      limit = foldl' (a: b: if b < a then b else a) n (
        (if isInt m then [ m ] else [ ]) ++ (if isInt p then [ (n * p / 100) ] else [ ])
      );
      ok = mErrors == [ ] && pErrors == [ ];
    in
    if usesCombinators s then
      {
        errors = [
          "${where}: selector uses \"and\"/\"not\", which are resolved at evaluation time and have no meaning in fleet.resolved"
        ];
        warnings = [ ];
      }
    else
      {
        errors = mErrors ++ pErrors;
        warnings =
          (if n == 0 then [ "${where}: selector matches no host" ] else [ ])
          ++ (
            if !ok then
              [ ]
            else if m == null && p == null then
              [ "${where}: sets neither maxInFlight nor maxInFlightPct, so it limits nothing" ]
            else if limit == 1 && n >= tightBudgetHosts then
              [ "${where}: admits one host at a time across ${toString n} hosts; rollouts through it will be slow" ]
            else
              [ ]
          );
      }
  ) budgets;

  # manifest's validator.freezes: a real period, a reason on one line,
  # declared channels named once. Nix compares from and until only when
  # both are in UTC with the same number of fractional digits, where
  # comparing the strings is comparing the times; the Go side compares
  # every pair.
  freezeErrors = u.concatImap (
    i: f:
    let
      where = "freezes[${toString i}]";
      from = f.from or null;
      until = f.until or null;
      reason = f.reason or null;
      chs = f.channels or null;
    in
    (
      if
        zuluSeconds from != null
        && zuluSeconds until != null
        && stringLength from == stringLength until
        && !(until > from)
      then
        [ "${where}: until ${zuluSeconds until} is not after from ${zuluSeconds from}" ]
      else
        [ ]
    )
    ++ (
      if !(isString reason) then
        [ ]
      else if match "[[:space:]]*" reason != null then
        [ "${where}: reason is empty; say why nothing may roll out" ]
      else if stringLength reason > maxFreezeReasonLen || match "[^[:cntrl:]]*" reason == null then
        [ "${where}: reason must be at most ${toString maxFreezeReasonLen} bytes on one line" ]
      else
        [ ]
    )
    ++ u.concatImap (
      j: ch:
      (if isString ch && channels ? ${ch} then [ ] else [ "${where}: channel ${u.q ch} does not exist" ])
      ++ (if elem ch (take j chs) then [ "${where}: channel ${u.q ch} is listed twice" ] else [ ])
    ) (listOf chs)
  ) freezes;
in
{
  errors =
    header
    ++ concatMap (c: c.errors) hostChecks
    ++ channelErrors
    ++ concatMap (c: c.errors) policyChecks
    ++ waveErrors
    ++ hostEdgeErrors
    ++ channelEdgeErrors
    ++ budgetNames.errors
    ++ concatMap (c: c.errors) budgetChecks
    ++ freezeErrors;
  warnings =
    concatMap (c: c.warnings) hostChecks
    ++ concatMap (c: c.warnings) policyChecks
    ++ budgetNames.warnings
    ++ concatMap (c: c.warnings) budgetChecks;
}
