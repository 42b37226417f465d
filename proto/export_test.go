package proto

// DecodeFleetFast is decodeFleetFast, for the tests that hold it to
// encoding/json.
var DecodeFleetFast = decodeFleetFast

// DecodeManifestFast is decodeManifestFast, for the same tests.
var DecodeManifestFast = decodeManifestFast
