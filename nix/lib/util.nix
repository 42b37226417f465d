# Small helpers for the nixfleet library. Builtins only: nothing here needs
# nixpkgs, so the library evaluates with a bare `nix-instantiate`.
let
  inherit (builtins)
    attrNames
    concatMap
    elem
    filter
    foldl'
    genList
    head
    isAttrs
    isBool
    isInt
    isList
    isString
    length
    listToAttrs
    replaceStrings
    sort
    tail
    ;

  # For q: Go's escapes of the ASCII control characters a Nix string can
  # hold.
  quoteFrom = [
    "\\"
    "\""
  ]
  ++ map (c: builtins.fromJSON "\"\\u00${hex2 c}\"") controlCodes;
  quoteTo = [
    "\\\\"
    "\\\""
  ]
  ++ map (c: goEscapes.${toString c} or "\\x${hex2 c}") controlCodes;
  # The ASCII control characters a Nix string can hold, and the ones Go
  # writes with a letter.
  controlCodes = genList (i: i + 1) 31 ++ [ 127 ];
  goEscapes = {
    "7" = "\\a";
    "8" = "\\b";
    "9" = "\\t";
    "10" = "\\n";
    "11" = "\\v";
    "12" = "\\f";
    "13" = "\\r";
  };
  # Two lower-case hexadecimal digits of 0 ≤ n < 256.
  hex2 =
    n:
    let
      d = i: builtins.substring i 1 "0123456789abcdef";
    in
    d (n / 16) + d (n - n / 16 * 16);
in
rec {
  # sortUnique ["b" "a" "b"] == ["a" "b"]
  sortUnique =
    l:
    let
      sorted = sort (a: b: a < b) l;
    in
    filter (x: x != null) (
      genList (
        i:
        let
          x = builtins.elemAt sorted i;
        in
        if i > 0 && builtins.elemAt sorted (i - 1) == x then null else x
      ) (length sorted)
    );

  # setOf ["a" "b"] == { a = true; b = true; }: constant-time membership.
  setOf =
    names:
    listToAttrs (
      map (n: {
        name = n;
        value = true;
      }) names
    );

  # Index-aware map: imap (i: x: …) list, i from 0.
  imap = f: l: genList (i: f i (builtins.elemAt l i)) (length l);

  # concatImap: concatMap with the index.
  concatImap = f: l: builtins.concatLists (imap f l);

  # Go's %q (strconv.Quote) for ASCII: a double-quoted string with
  # backslash and quote escaped, and every control character (1–31, 127) as
  # Go writes it: \a \b \t \n \v \f \r, the others \x01 … \x1f, \x7f. Nix
  # strings hold no NUL. Outside ASCII the two differ: Go escapes
  # characters it deems unprintable (\u00a0) and invalid UTF-8 (\xff),
  # which this leaves as they are.
  q =
    s:
    if isString s then "\"" + replaceStrings quoteFrom quoteTo s + "\"" else builtins.toJSON s;
  # The value's type, as error messages name it.
  typeOf = v: builtins.typeOf v;

  isStringList = v: isList v && builtins.all isString v;
  isIntOrNull = v: v == null || isInt v;
  isStringOrNull = v: v == null || isString v;

  # Members of the attribute set v that are not in allowed.
  unknownAttrs = allowed: v: filter (k: !(elem k allowed)) (attrNames v);

  # Problems with the shape of an attribute set: it must be one, hold no
  # member outside required ++ optional and hold every required member.
  shapeProblems =
    where:
    {
      required ? [ ],
      optional ? [ ],
    }:
    v:
    if !isAttrs v then
      [ "${where}: must be an attribute set, not a ${typeOf v}" ]
    else
      map (k: "${where}: unknown attribute ${q k}") (unknownAttrs (required ++ optional) v)
      ++ map (k: "${where}: ${k} is required") (filter (k: !(v ? ${k})) required);

  # One problem when v (the member `name` of `where`) fails pred.
  expect =
    where: name: pred: what: v:
    if pred v then [ ] else [ "${where}: ${name} must be ${what}" ];

  # All but the members of a path before the first occurrence of x:
  # dropUntil "b" ["a" "b" "c"] == ["b" "c"].
  dropUntil =
    x: l:
    if l == [ ] then
      [ ]
    else if head l == x then
      l
    else
      dropUntil x (tail l);

  # Whether s is a date-time in the RFC 3339 form Go's time.Time reads from
  # JSON: "2026-12-20T00:00:00Z", "2026-12-20T01:00:00+01:00", with
  # optional fractional seconds after a "."; an upper-case T and Z, and a
  # day the month has (29 February only in leap years). Go's decoder, which
  # is a little more lenient (a "," before the fraction, an offset of
  # 24:00), stays authoritative.
  isRFC3339 =
    s:
    let
      m =
        if builtins.isString s then
          builtins.match "([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])" s
        else
          null;
      num = t: builtins.fromJSON (builtins.head (builtins.match "0*([0-9]+)" t));
      year = num (builtins.elemAt m 0);
      month = num (builtins.elemAt m 1);
      day = num (builtins.elemAt m 2);
      divides = d: n: n / d * d == n;
      leap = divides 4 year && (!(divides 100 year) || divides 400 year);
      monthDays =
        if month == 2 then
          (if leap then 29 else 28)
        else if elem month [
          4
          6
          9
          11
        ] then
          30
        else
          31;
    in
    m != null && day <= monthDays;

  # Print every warning (in order) when v is forced, then return v.
  traceAll = ws: v: foldl' (acc: w: builtins.trace w acc) v ws;

  inherit isBool concatMap;
}
