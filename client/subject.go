package client

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxSubjectLen is the longest subject, in bytes, that Tollgate takes as
// it is; a longer one is sent as its digest (see Item.Subject).
const maxSubjectLen = 512

// digestPrefix starts every subject the client sends as a digest.
const digestPrefix = "sha256:"

// subjectOf is the subject sent to Tollgate for s: s itself, or, when
// Tollgate would refuse s or could not keep it apart from others (more
// than maxSubjectLen bytes, not valid UTF-8, which JSON would turn into
// U+FFFD, or a control character), "sha256:" and the hex SHA-256 of its
// bytes, 71 bytes. A subject that already starts with "sha256:" is sent as
// its digest too, so that no subject sent as it is can share a counter
// with another's digest: distinct subjects stay distinct.
func subjectOf(s string) string {
	if len(s) <= maxSubjectLen && utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl) &&
		!strings.HasPrefix(s, digestPrefix) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return digestPrefix + hex.EncodeToString(sum[:])
}
