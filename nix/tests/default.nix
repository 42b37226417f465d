# Every mkFleet case of testdata/nix, run by Nix alone (the flake's
# `checks.<system>.mkfleet`; the Go tests in nix/ run the same cases and
# more):
#
#   fleets/<name>.nix   must evaluate; `resolved` equals the golden
#                       fleets/<name>.resolved.json, warnings as expected
#   invalid/<name>.nix  `resolved` must throw; errors and warnings exactly
#                       as the case lists them
#
#   nix-instantiate --eval --strict --json nix/tests -A failures   # []
let
  inherit (builtins)
    attrNames
    concatMap
    filter
    fromJSON
    length
    match
    readDir
    readFile
    substring
    stringLength
    toJSON
    tryEval
    ;
  cases =
    dir:
    let
      entries = readDir dir;
    in
    map (n: {
      name = substring 0 (stringLength n - 4) n;
      c = import ./case.nix { file = dir + "/${n}"; };
    }) (filter (n: entries.${n} == "regular" && match ".*[.]nix" n != null) (attrNames entries));
  fleets = ../../testdata/nix/fleets;
  invalid = ../../testdata/nix/invalid;

  compare =
    what: got: want:
    if got == want then [ ] else [ "${what}: got ${toJSON got}, want ${toJSON want}" ];

  validResults = map (
    { name, c }:
    {
      name = "fleets/${name}";
      problems =
        compare "errors" c.errors [ ]
        ++ compare "warnings" c.warnings c.expect.warnings
        ++ (
          if c.errors != [ ] then
            [ ]
          else if c.resolved == fromJSON (readFile (fleets + "/${name}.resolved.json")) then
            [ ]
          else
            [ "resolved differs from ${name}.resolved.json" ]
        );
    }
  ) (cases fleets);

  invalidResults = map (
    { name, c }:
    {
      name = "invalid/${name}";
      problems =
        compare "errors" c.errors c.expect.errors
        ++ compare "warnings" c.warnings c.expect.warnings
        ++ (if (tryEval c.resolved).success then [ "resolved evaluated; it must throw" ] else [ ])
        ++ (if c.expect.errors == [ ] then [ "the case lists no expected error" ] else [ ]);
    }
  ) (cases invalid);

  results = validResults ++ invalidResults;
in
{
  failures = concatMap (r: map (p: "${r.name}: ${p}") r.problems) results;
  cases = map (r: r.name) results;
  count = length results;
}
