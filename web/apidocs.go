package web

import "embed"

// apiDocsFiles holds the scripts of the API reference page (/docs): Redoc's
// standalone bundle, vendored as published (apidocs/redoc/README.md says
// which release and where from), and Tollgate's own few lines that point it
// at the OpenAPI document.
//
//go:embed apidocs/init.js apidocs/redoc/redoc.standalone.js
var apiDocsFiles embed.FS

// Script is a script the pages load from Tollgate itself.
type Script struct {
	// Path is where it is served; Src is Path with a digest of Body as its
	// query, for the page's src attribute, so that a changed script is never
	// taken from a browser's cache and an unchanged one may be cached for
	// good.
	Path, Src string
	Body      []byte
}

func embeddedScript(file, path string) Script {
	b := mustRead(apiDocsFiles, file)
	return Script{Path: path, Src: path + "?v=" + digest(b), Body: b}
}

// RedocScript is Redoc's standalone bundle and APIDocsScript the script
// that renders the OpenAPI document with it; APIDocs loads both.
var (
	RedocScript   = embeddedScript("apidocs/redoc/redoc.standalone.js", "/docs/redoc.standalone.js")
	APIDocsScript = embeddedScript("apidocs/init.js", "/docs/init.js")
)
