# A stand-in for the part of nixpkgs the modules use: writeText. Its store
# path is fake but tied to the text (the first 32 hex digits of its
# SHA-256), so a test can tell which text a path in a command line holds.
{
  writeText = name: text: {
    inherit name text;
    outPath = "/nix/store/${builtins.substring 0 32 (builtins.hashString "sha256" text)}-${name}";
  };
}
