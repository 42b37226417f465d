# A stand-in for the part of nixpkgs the modules use:
#
#   - writeText. Its store path is fake but tied to the text (the first
#     32 hex digits of its SHA-256), so a test can tell which text a path
#     in a command line holds;
#   - formats.toml { }: type, nixpkgs' TOML value (booleans, integers,
#     floats, strings, paths, attribute sets and lists of them; no null),
#     and generate, a writeText of the value as TOML text. nixpkgs runs
#     remarshal's json2toml instead; the text differs in layout, not in
#     what a TOML reader reads. Keys are bare when they can be, quoted
#     otherwise; strings are JSON strings, which are TOML basic strings; a
#     float keeps a decimal point; a list of attribute sets is an array of
#     tables, any other list an array; a store path (an attribute set with
#     an outPath) is its path.
let
  lib = import ./stub-lib.nix;
  inherit (builtins)
    all
    attrNames
    concatStringsSep
    filter
    isAttrs
    isBool
    isFloat
    isInt
    isList
    isPath
    isString
    match
    toJSON
    ;

  writeText = name: text: {
    inherit name text;
    outPath = "/nix/store/${builtins.substring 0 32 (builtins.hashString "sha256" text)}-${name}";
  };

  toTOML =
    let
      isTable = v: isAttrs v && !(v ? outPath);
      isTables = v: isList v && v != [ ] && all isTable v;
      key = k: if match "[A-Za-z0-9_-]+" k != null then k else toJSON k;
      dotted = path: concatStringsSep "." (map key path);
      value =
        v:
        if isBool v then
          (if v then "true" else "false")
        else if isInt v || isString v then
          toJSON v
        else if isFloat v then
          let
            s = toJSON v;
          in
          if match ".*[.e].*" s != null then s else "${s}.0"
        else if isPath v || (isAttrs v && v ? outPath) then
          toJSON "${v}"
        else if isList v then
          "[" + concatStringsSep ", " (map value v) + "]"
        else if isTable v then
          "{ " + concatStringsSep ", " (map (k: "${key k} = ${value v.${k}}") (attrNames v)) + " }"
        else
          throw "stub: formats.toml: ${builtins.typeOf v} is not a TOML value";
      # A table's header, left out when it holds only tables (which
      # name it in theirs).
      header =
        path: t:
        if t != { } && all (k: isTable t.${k} || isTables t.${k}) (attrNames t) then
          ""
        else
          "\n[${dotted path}]\n";
      # The keys of a table, then its tables, then its arrays of tables.
      table =
        path: t:
        let
          names = attrNames t;
          tables = filter (k: isTable t.${k}) names;
          arrays = filter (k: isTables t.${k}) names;
          plain = filter (k: !(isTable t.${k}) && !(isTables t.${k})) names;
        in
        concatStringsSep "" (map (k: "${key k} = ${value t.${k}}\n") plain)
        + concatStringsSep "" (map (k: header (path ++ [ k ]) t.${k} + table (path ++ [ k ]) t.${k}) tables)
        + concatStringsSep "" (
          map (
            k: concatStringsSep "" (map (e: "\n[[${dotted (path ++ [ k ])}]]\n" + table (path ++ [ k ]) e) t.${k})
          ) arrays
        );
    in
    table [ ];
in
{
  inherit writeText;

  formats.toml =
    { }:
    {
      type =
        let
          valueType =
            lib.types.oneOf [
              lib.types.bool
              lib.types.int
              lib.types.float
              lib.types.str
              lib.types.path
              (lib.types.attrsOf valueType)
              (lib.types.listOf valueType)
            ]
            // {
              description = "TOML value";
            };
        in
        valueType;
      generate = name: value: writeText name (toTOML value);
    };
}
