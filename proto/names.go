package proto

import (
	"unicode"
	"unicode/utf8"
)

// Nameable reports whether s can be a rollout id, host or channel name at
// all. Every name comes from a validated fleet (rfcs/0001): valid UTF-8
// without control characters. Other text names nothing, so a server need
// not ask its store (PostgreSQL refuses NUL and invalid UTF-8 in text).
func Nameable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}
