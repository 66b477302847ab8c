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
var StylesheetPath = func() string {
	b, err := Static.ReadFile("static/dashboard.css")
	if err != nil {
		panic("web: the embedded style sheet is missing: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return "/admin/static/dashboard.css?v=" + hex.EncodeToString(sum[:6])
}()
