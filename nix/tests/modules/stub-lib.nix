# A stand-in for the part of nixpkgs' lib that nix/modules use, for
# evaluating them without nixpkgs (eval.nix). It is not the module system:
#
#   - option values are the test's settings or the declared defaults,
#     checked against the declared types (a small subset of lib.types);
#     there is no merging of several definitions and no priorities;
#   - mkIf, mkMerge and mkDefault are resolved structurally in the
#     module's config (mkDefault simply yields its value);
#   - a submodule's freeformType takes the definitions of no declared
#     option, as one attribute set checked against it (as in nixpkgs,
#     where a settings format's type is the usual freeformType);
#   - mkRenamedOptionModule, mkChangedOptionModule and
#     mkRemovedOptionModule return a description of the option module
#     rather than the module: eval.nix applies those of a module's
#     imports to the test's definitions (applyOptionModules), with
#     nixpkgs' warnings and assertion messages.
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
    isFloat
    isInt
    isList
    isPath
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
  optionalAttrs = cond: attrs: if cond then attrs else { };
  filterAttrs = pred: attrs: removeAttrs attrs (filter (k: !(pred k attrs.${k})) (attrNames attrs));
  mapAttrsToList = f: attrs: map (k: f k attrs.${k}) (attrNames attrs);

  # The option modules of nixpkgs' lib/modules.nix, described (see the
  # header). from and to are full option paths.
  mkRenamedOptionModule = from: to: {
    _type = "optionModule";
    kind = "renamed";
    inherit from to;
  };
  mkChangedOptionModule = from: to: changeFn: {
    _type = "optionModule";
    kind = "changed";
    inherit from to changeFn;
  };
  mkRemovedOptionModule = from: replacementInstructions: {
    _type = "optionModule";
    kind = "removed";
    inherit from replacementInstructions;
  };

  # Applies option modules to defs, the definitions of the options under
  # prefix (a path): a definition of a renamed option becomes one of its
  # new path, with nixpkgs' warning; a changed one is replaced by
  # changeFn's value (changeFn sees a config holding the old value) at the
  # new path, with nixpkgs' warning; a removed one fails nixpkgs'
  # assertion. The option modules' warnings and assertions come back
  # beside the new definitions (the module system adds them to the
  # configuration's).
  applyOptionModules =
    prefix: modules: defs:
    let
      n = builtins.length prefix;
      rel = path: builtins.genList (i: builtins.elemAt path (n + i)) (builtins.length path - n);
      show = path: builtins.concatStringsSep "." path;
      files = "`<the test's definitions>'";
      hasPath =
        path: v: path == [ ] || (isAttrs v && v ? ${builtins.head path} && hasPath (builtins.tail path) v.${builtins.head path});
      getPath = path: v: builtins.foldl' (x: k: x.${k}) v path;
      setPath =
        path: x: v:
        if path == [ ] then
          x
        else
          let
            k = builtins.head path;
          in
          v // { ${k} = setPath (builtins.tail path) x (v.${k} or { }); };
      # Removes path, and the attribute sets it leaves empty.
      removePath =
        path: v:
        let
          k = builtins.head path;
          rest = removePath (builtins.tail path) v.${k};
        in
        if builtins.length path == 1 then
          removeAttrs v [ k ]
        else if rest == { } then
          removeAttrs v [ k ]
        else
          v // { ${k} = rest; };
      step =
        acc: m:
        let
          from = rel m.from;
          defined = hasPath from acc.defs;
          value = getPath from acc.defs;
          to = rel m.to;
          moved =
            x:
            if hasPath to acc.defs then
              throw "stub: ${show m.to} is defined twice (also as ${show m.from}); the stub cannot merge definitions"
            else
              setPath to x (removePath from acc.defs);
        in
        if !defined then
          acc
        else if m.kind == "renamed" then
          acc
          // {
            defs = moved value;
            warnings = acc.warnings ++ [ "The option `${show m.from}' defined in ${files} has been renamed to `${show m.to}'." ];
          }
        else if m.kind == "changed" then
          acc
          // {
            defs = moved (m.changeFn (setPath m.from value { }));
            warnings = acc.warnings ++ [
              "The option `${show m.from}' defined in ${files} has been changed to `${show m.to}' that has a different type. Please read `${show m.to}' documentation and update your configuration accordingly."
            ];
          }
        else
          acc
          // {
            defs = removePath from acc.defs;
            assertions = acc.assertions ++ [
              {
                assertion = false;
                message = "The option definition `${show m.from}' in ${files} no longer has any effect; please remove it.\n${m.replacementInstructions}\n";
              }
            ];
          };
    in
    builtins.foldl' step {
      inherit defs;
      warnings = [ ];
      assertions = [ ];
    } (filter (m: isAttrs m && (m._type or null) == "optionModule") modules);

  types = {
    bool = mkType "boolean" isBool;
    str = mkType "string" isString;
    int = mkType "signed integer" isInt;
    float = mkType "floating point number" isFloat;
    # nixpkgs: a value that coerces to a string starting with /.
    path = mkType "path" (v: isPath v || (isString v && builtins.substring 0 1 v == "/"));
    oneOf = ts: {
      _type = "type";
      description = builtins.concatStringsSep " or " (map (t: t.description) ts);
      check = v: builtins.any (t: t.check v) ts;
      fill =
        path: v:
        let
          t = builtins.head (filter (t: t.check v) ts);
        in
        t.fill path v;
      subOptions = null;
    };
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
    # m.freeformType (optional): the type of the attribute set of the
    # definitions that match no option of m.options.
    submodule = m: {
      _type = "type";
      description = "submodule";
      check = isAttrs;
      fill =
        path: v:
        if m ? freeformType then
          let
            free = removeAttrs v (attrNames m.options);
          in
          if m.freeformType.check free then
            m.freeformType.fill path free // evalOptions path m.options (removeAttrs v (attrNames free))
          else
            throw "stub: ${path}: ${toJSON free} is not a ${m.freeformType.description}"
        else
          evalOptions path m.options v;
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
