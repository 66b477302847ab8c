package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
)

// Static holds the dashboard's style sheet (static/dashboard.css), served
// under /admin/static/. The pages need no script.
//
//go:embed static
var Static embed.FS

// StylesheetPath is where the dashboard's style sheet is served; its query
// is a digest of the sheet, so that a changed sheet is never taken from a
// browser's cache and an unchanged one may be cached for long.
var StylesheetPath = "/admin/static/dashboard.css?v=" + digest(mustRead(Static, "static/dashboard.css"))

// digest is the short content digest put in the query of an embedded
// file's address.
func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// mustRead reads an embedded file; one missing is a broken build.
func mustRead(fsys embed.FS, name string) []byte {
	b, err := fsys.ReadFile(name)
	if err != nil {
		panic("web: the embedded file " + name + " is missing: " + err.Error())
	}
	return b
}
