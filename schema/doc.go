// Package schema holds the documents other implementations build on: the
// JSON Schemas of the signed artifacts and the notification bodies, and
// the OpenAPI document of /v1 (openapi.json). It has no code; its test
// keeps /v1 compatible with what was published (API-CHANGES.md).
package schema
