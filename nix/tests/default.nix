# Every mkFleet case of testdata/nix and of nix/tests/{fleets,invalid}
# (the change-control and canary-analysis cases), run by Nix alone (the flake's
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
  # The cases of the directories dirs ({ label; dir; }), each named
  # <label>/<name> and with the path of its golden document.
  cases = concatMap (
    { label, dir }:
    let
      entries = readDir dir;
    in
    map (
      n:
      let
        name = substring 0 (stringLength n - 4) n;
      in
      {
        name = "${label}/${name}";
        golden = dir + "/${name}.resolved.json";
        c = import ./case.nix { file = dir + "/${n}"; };
      }
    ) (filter (n: entries.${n} == "regular" && match ".*[.]nix" n != null) (attrNames entries))
  );
  fleets = [
    {
      label = "fleets";
      dir = ../../testdata/nix/fleets;
    }
    {
      label = "nix/tests/fleets";
      dir = ./fleets;
    }
  ];
  invalid = [
    {
      label = "invalid";
      dir = ../../testdata/nix/invalid;
    }
    {
      label = "nix/tests/invalid";
      dir = ./invalid;
    }
  ];

  compare =
    what: got: want:
    if got == want then [ ] else [ "${what}: got ${toJSON got}, want ${toJSON want}" ];

  validResults = map (
    {
      name,
      golden,
      c,
    }:
    {
      inherit name;
      problems =
        compare "errors" c.errors [ ]
        ++ compare "warnings" c.warnings c.expect.warnings
        ++ (
          if c.errors != [ ] then
            [ ]
          else if c.resolved == fromJSON (readFile golden) then
            [ ]
          else
            [ "resolved differs from ${baseNameOf golden}" ]
        );
    }
  ) (cases fleets);

  invalidResults = map (
    { name, c, ... }:
    {
      inherit name;
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
