package proto

// DecodeFleetFast is decodeFleetFast, for the tests that hold it to
// encoding/json.
var DecodeFleetFast = decodeFleetFast
