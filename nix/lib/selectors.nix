# Selectors (rfcs/0001 §2.1, rfcs/0010 §2.3).
#
# A selector is an attribute set of rules: tags (all of), tagsAny (any of),
# hosts (named), channel, all. Its plain rules OR together; a selector with
# no rule matches nothing. Two evaluation-time combinators narrow it:
# `and` (a list of selectors the host must also match) and `not` (a selector
# the host must not match). A selector with combinators and no plain rule
# starts from every host: { not = { tags = [ "db" ]; }; } is every host but
# the databases.
#
# fleet.resolved has no combinators: a selector that uses them is written
# out as the sorted list of the hosts it matches ({ hosts = [ … ]; }).
let
  u = import ./util.nix;
  inherit (builtins)
    all
    any
    attrNames
    elem
    filter
    isAttrs
    isBool
    isList
    isString
    ;
  plainRules = [
    "tags"
    "tagsAny"
    "hosts"
    "channel"
    "all"
  ];
  rules = plainRules ++ [
    "and"
    "not"
  ];
in
rec {
  # The internal form of a selector, whatever its input looked like:
  # mistyped members become empty ones (problems reports them).
  normalize =
    s:
    let
      a = if isAttrs s then s else { };
      strings =
        k:
        let
          v = a.${k} or [ ];
        in
        if u.isStringList v then v else [ ];
      ch = a.channel or null;
      andList = a.and or [ ];
      notSel = a.not or null;
    in
    {
      tags = strings "tags";
      tagsAny = strings "tagsAny";
      hosts = strings "hosts";
      channel = if isString ch && ch != "" then ch else null;
      all = (a.all or false) == true;
      and = if isList andList then map normalize andList else [ ];
      not = if notSel == null then null else normalize notSel;
    };

  # Input problems of a selector: its shape, the types of its rules, and
  # names of hosts or channels the fleet does not declare (a typo there
  # would silently select nothing).
  problems =
    where: hostSet: channelSet: s:
    if !isAttrs s then
      [ "${where}: must be an attribute set, not a ${builtins.typeOf s}" ]
    else
      map (k: "${where}: unknown selector rule ${u.q k} (known: ${builtins.concatStringsSep ", " rules})") (
        u.unknownAttrs rules s
      )
      ++ builtins.concatMap (
        k: if s ? ${k} && !(u.isStringList s.${k}) then [ "${where}: ${k} must be a list of strings" ] else [ ]
      ) [ "tags" "tagsAny" "hosts" ]
      ++ (if !(u.isStringOrNull (s.channel or null)) then [ "${where}: channel must be a string" ] else [ ])
      ++ (if !(isBool (s.all or false)) then [ "${where}: all must be a boolean" ] else [ ])
      ++ (
        if !(isList (s.and or [ ])) then
          [ "${where}: and must be a list of selectors" ]
        else
          u.concatImap (i: x: problems "${where}.and[${toString i}]" hostSet channelSet x) (s.and or [ ])
      )
      ++ (if (s.not or null) == null then [ ] else problems "${where}.not" hostSet channelSet s.not)
      ++ map (h: "${where}: host ${u.q h} does not exist") (
        filter (h: !(hostSet ? ${h})) (if u.isStringList (s.hosts or [ ]) then s.hosts or [ ] else [ ])
      )
      ++ (
        let
          ch = s.channel or null;
        in
        if isString ch && ch != "" && !(channelSet ? ${ch}) then
          [ "${where}: channel ${u.q ch} does not exist" ]
        else
          [ ]
      );

  hasCombinators = n: n.and != [ ] || n.not != null;

  hasPlainRule =
    n: n.all || n.channel != null || n.tags != [ ] || n.tagsAny != [ ] || n.hosts != [ ];

  # Whether the host `name` (normalized: tags, channel) matches the
  # normalized selector n.
  matches =
    n: name: h:
    let
      plain =
        n.all
        || (n.channel != null && h.channel == n.channel)
        || elem name n.hosts
        || (n.tags != [ ] && all (t: elem t h.tags) n.tags)
        || any (t: elem t h.tags) n.tagsAny;
      narrowed = all (x: matches x name h) n.and && (n.not == null || !(matches n.not name h));
    in
    if hasPlainRule n then
      plain && narrowed
    else
      hasCombinators n && narrowed;

  # The names of the hosts (an attribute set of normalized hosts) that
  # match n, sorted.
  select = hosts: n: filter (name: matches n name hosts.${name}) (attrNames hosts);

  # The fleet.resolved form of n: lists sorted and de-duplicated, empty
  # rules dropped; a selector with combinators becomes the hosts it
  # matches.
  toWire =
    hosts: n:
    let
      plain =
        if hasCombinators n then
          { hosts = select hosts n; }
        else
          {
            tags = u.sortUnique n.tags;
            tagsAny = u.sortUnique n.tagsAny;
            hosts = u.sortUnique n.hosts;
            inherit (n) channel all;
          };
    in
    builtins.removeAttrs plain (filter (k: plain.${k} == [ ] || plain.${k} == null || plain.${k} == false) (attrNames plain));
}
