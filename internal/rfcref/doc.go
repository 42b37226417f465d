// Package rfcref checks the references to rfcs/ in the repository's Go
// code: every one must name an RFC, a heading, an item or a rule that
// exists. Its test (TestRepositoryReferences) reads every .go file of the
// repository but those under testdata/ and hidden directories, and reports
// each broken reference as file:line.
//
// The grammar. A reference starts with an RFC:
//
//   - rfcs/NNNN: some rfcs/NNNN-*.md exists;
//   - rfcs/NNNN-name.md (or rfcs/NNNN-name): exactly that file exists;
//   - a bare NNNN (four digits standing alone), only when " §" or
//     " rule"/" rules" follows and rfcs/ holds an RFC NNNN, so that
//     "RFC 8785 §3.2.3" (an IETF RFC) or a year is never read as one.
//
// Then, after spaces (or, when the RFC ends its line, at the start of the
// next line if that is a comment line, "// …"), it may go on with:
//
//  1. §X: X is the text up to the first ")", ",", ";", ":", '"', "`", "]",
//     a "." followed by a space or the end of the line, or the end of the
//     line. A heading of the RFC is a "##", "###" or "####" line outside
//     fenced code blocks. X names heading H when its words (split on
//     spaces, compared exactly; a heading's words lose a trailing ":", ","
//     or ";") start with H's words, or are a shorter start of them:
//     "§Check-ins" and "§Check-ins at scale" both name "### Check-ins at
//     scale", "§Events" names "#### Events: `GET /v1/events`". A numbered
//     heading ("## 4. Rollout manifest", "### 4.1 Projection") is also
//     named by its number alone ("§4", "§4.1").
//  2. An item: a number right after the heading, "§Tick loop 3", names
//     the item "3. …" of H's section (a line that starts with "3. " at
//     column 0, before the next heading); it must exist. A dotted number
//     that is no heading's number names an item of the heading numbered by
//     the rest: "§1.6" is item 6 of "## 1. Wire rules" (the RFCs' own
//     habit, "0001 §4.1.2").
//  3. "rule N" or "rules N, M–P and Q" (ranges with "–" or "-"), directly
//     after the RFC or after "§X, ": each number must be an item of the
//     RFC's "## Rules" section.
//
// Any other words after the heading ("§Decisions table", "§State, which")
// are prose, not checked. A "§" without an RFC before it (a section of the
// file one is in, or "SPEC §4") is not a reference to rfcs/ and not
// checked.
package rfcref
