# A stand-in for the part of nixpkgs' lib that nix/modules use, for
# evaluating them without nixpkgs (eval.nix). It is not the module system:
#
#   - option values are the test's settings or the declared defaults,
#     checked against the declared types (a small subset of lib.types);
#     there is no merging of several definitions and no priorities;
#   - mkIf, mkMerge and mkDefault are resolved structurally in the
#     module's config (mkDefault simply yields its value).
#
# So it shows what a module does with given option values (its unit, its
# command line, its files, its assertions), not that nixpkgs accepts the
# module; the flake's checks evaluate the modules with nixpkgs. Every name
# here exists in nixpkgs' lib with the meaning used.
let
  inherit (builtins)
    all
    attrNames
    concatMap
    elem
    filter
    isAttrs
    isBool
    isInt
    isList
    isString
    mapAttrs
    match
    toJSON
    ;

  mkType =
    description: check:
    {
      _type = "type";
      inherit description check;
      fill = _: v: v;
      subOptions = null;
    };
in
rec {
  mkOption = attrs: attrs // { _type = "option"; };
  mkEnableOption =
    name:
    mkOption {
      type = types.bool;
      default = false;
      example = true;
      description = "Whether to enable ${name}.";
    };
  mkIf = condition: content: {
    _type = "if";
    inherit condition content;
  };
  mkMerge = contents: {
    _type = "merge";
    inherit contents;
  };
  mkDefault = content: {
    _type = "override";
    priority = 1000;
    inherit content;
  };
  literalExpression = text: {
    _type = "literalExpression";
    inherit text;
  };
  optional = cond: x: if cond then [ x ] else [ ];
  optionals = cond: xs: if cond then xs else [ ];

  types = {
    bool = mkType "boolean" isBool;
    str = mkType "string" isString;
    package = mkType "package" (v: isAttrs v && v ? outPath);
    enum = values: mkType "one of ${toJSON values}" (v: elem v values);
    strMatching = re: mkType "string matching ${toJSON re}" (v: isString v && match re v != null);
    ints.positive = mkType "positive integer" (v: isInt v && v > 0);
    ints.between =
      lo: hi: mkType "integer between ${toString lo} and ${toString hi}" (v: isInt v && v >= lo && v <= hi);
    nullOr = t: {
      _type = "type";
      description = "null or ${t.description}";
      check = v: v == null || t.check v;
      fill = path: v: if v == null then null else t.fill path v;
      inherit (t) subOptions;
    };
    listOf = t: {
      _type = "type";
      description = "list of ${t.description}";
      check = v: isList v && all t.check v;
      fill = path: v: map (x: t.fill "${path}.*" x) v;
      inherit (t) subOptions;
    };
    attrsOf = t: {
      _type = "type";
      description = "attribute set of ${t.description}";
      check = v: isAttrs v && all t.check (builtins.attrValues v);
      fill = path: v: mapAttrs (k: x: t.fill "${path}.${k}" x) v;
      inherit (t) subOptions;
    };
    either = a: b: {
      _type = "type";
      description = "${a.description} or ${b.description}";
      check = v: a.check v || b.check v;
      fill = path: v: if a.check v then a.fill path v else b.fill path v;
      subOptions = if a.subOptions != null then a.subOptions else b.subOptions;
    };
    submodule = m: {
      _type = "type";
      description = "submodule";
      check = isAttrs;
      fill = path: v: evalOptions path m.options v;
      subOptions = m.options;
    };
  };

  isOption = o: isAttrs o && (o._type or null) == "option";

  # The values of the options decls (nested attribute sets of mkOption)
  # for the definitions defs: each defined value checked against its
  # type, each undefined one its default.
  evalOptions =
    path: decls: defs:
    let
      unknown = filter (k: !(decls ? ${k})) (attrNames defs);
    in
    if unknown != [ ] then
      throw "stub: the option ${path}.${builtins.head unknown} does not exist"
    else
      mapAttrs (
        name: d:
        let
          p = "${path}.${name}";
        in
        if isOption d then
          let
            v =
              if defs ? ${name} then
                defs.${name}
              else if d ? default then
                d.default
              else
                throw "stub: the option ${p} is used but not defined";
          in
          if d.type.check v then d.type.fill p v else throw "stub: ${p}: ${toJSON v} is not a ${d.type.description}"
        else
          evalOptions p d (defs.${name} or { })
      ) decls;

  # The options of decls (and of their submodules) that lack a type or a
  # description.
  undocumented =
    path: decls:
    concatMap (
      name:
      let
        d = decls.${name};
        p = "${path}.${name}";
      in
      if isOption d then
        (if d ? type && isString (d.description or null) && d.description != "" then [ ] else [ p ])
        ++ (if (d.type.subOptions or null) != null then undocumented "${p}.*" d.type.subOptions else [ ])
      else
        undocumented p d
    ) (attrNames decls);

  # The module's config with mkIf, mkMerge and mkDefault resolved.
  resolve =
    v:
    let
      absent = {
        _type = "absent";
      };
      go =
        v:
        if isAttrs v && (v._type or null) == "if" then
          (if v.condition then go v.content else absent)
        else if isAttrs v && (v._type or null) == "override" then
          go v.content
        else if isAttrs v && (v._type or null) == "merge" then
          builtins.foldl' merge { } (filter (x: x != absent) (map go v.contents))
        else if isAttrs v && !(v ? outPath) && (v._type or null) == null then
          let
            resolved = mapAttrs (_: go) v;
          in
          builtins.removeAttrs resolved (filter (k: resolved.${k} == absent) (attrNames resolved))
        else
          v;
      merge =
        a: b:
        if isAttrs a && isAttrs b then
          a // mapAttrs (k: v: if a ? ${k} then merge a.${k} v else v) b
        else if isList a && isList b then
          a ++ b
        else if a == b then
          a
        else
          throw "stub: conflicting definitions ${toJSON a} and ${toJSON b}";
      top = go v;
    in
    if top == absent then { } else top;
}
