package httpapi

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/tollgate/tollgate/web"
)

// TestAPIDocsPage: /docs is an HTML page that loads its scripts from
// Tollgate only, under a Content-Security-Policy that names no other host
// and allows no inline script, and whose one inline allowance, a style
// nonce, is new in every answer and the one its elements carry.
func TestAPIDocsPage(t *testing.T) {
	t.Parallel()
	e := newPublicEcho(t, 1000)
	var nonces []string
	for range 2 {
		rec := getFrom(e, "/docs", "192.0.2.10")
		if rec.Code != http.StatusOK {
			t.Fatalf("/docs: %d", rec.Code)
		}
		h := rec.Header()
		for name, want := range map[string]string{
			"Content-Type":           "text/html; charset=UTF-8",
			"Cache-Control":          "no-store",
			"X-Content-Type-Options": "nosniff",
		} {
			if got := h.Get(name); got != want {
				t.Errorf("/docs %s: %q, want %q", name, got, want)
			}
		}
		csp := directives(t, h.Get("Content-Security-Policy"))
		for name, want := range map[string][]string{
			"default-src": {"'none'"}, "script-src": {"'self'"}, "connect-src": {"'self'"}, "img-src": {"'self'", "data:"},
			"frame-ancestors": {"'none'"}, "base-uri": {"'none'"}, "form-action": {"'none'"},
		} {
			if got := csp[name]; !slices.Equal(got, want) {
				t.Errorf("Content-Security-Policy %s: %q, want %q", name, got, want)
			}
		}
		// The style sources: hashes of Redoc's fixed sheets, and one nonce.
		var nonce string
		for _, src := range csp["style-src"] {
			switch {
			case strings.HasPrefix(src, "'sha256-"):
			case strings.HasPrefix(src, "'nonce-") && nonce == "":
				nonce = strings.TrimSuffix(strings.TrimPrefix(src, "'nonce-"), "'")
			default:
				t.Errorf("Content-Security-Policy style-src allows %s", src)
			}
		}
		if len(nonce) < 22 {
			t.Fatalf("Content-Security-Policy style-src: %q, want one nonce of 128 bits or more", csp["style-src"])
		}
		nonces = append(nonces, nonce)

		doc, err := html.Parse(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		var scripts []string
		for n := range doc.Descendants() {
			if n.Type != html.ElementNode {
				continue
			}
			switch n.Data {
			case "script":
				scripts = append(scripts, attr(n, "src"))
				if attr(n, "src") == "" {
					t.Error("an inline script")
				}
			case "style":
				if attr(n, "nonce") != nonce {
					t.Errorf("a style element with nonce %q, want the answer's %q", attr(n, "nonce"), nonce)
				}
			}
		}
		if want := []string{web.RedocScript.Src, web.APIDocsScript.Src}; !slices.Equal(scripts, want) {
			t.Errorf("scripts %q, want %q", scripts, want)
		}
	}
	if nonces[0] == nonces[1] {
		t.Errorf("two answers with the nonce %q", nonces[0])
	}
}

// TestAPIDocsScripts: the scripts are served as JavaScript, cached for good
// (their addresses change with their content), compressed for a client
// that accepts gzip, and are the embedded files.
func TestAPIDocsScripts(t *testing.T) {
	t.Parallel()
	e := newPublicEcho(t, 1000)
	for _, s := range []web.Script{web.RedocScript, web.APIDocsScript} {
		t.Run(s.Path, func(t *testing.T) {
			for _, gz := range []bool{false, true} {
				req := httptest.NewRequest(http.MethodGet, s.Src, nil)
				if gz {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					t.Fatalf("%s: %d", s.Src, rec.Code)
				}
				h := rec.Header()
				if got := h.Get("Content-Type"); got != "text/javascript; charset=utf-8" {
					t.Errorf("Content-Type %q", got)
				}
				if got := h.Get("Cache-Control"); got != "public, max-age=31536000, immutable" {
					t.Errorf("Cache-Control %q", got)
				}
				if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
					t.Errorf("X-Content-Type-Options %q", got)
				}
				body := rec.Body.Bytes()
				if gz {
					if got := h.Get("Content-Encoding"); got != "gzip" {
						t.Fatalf("Accept-Encoding gzip: Content-Encoding %q", got)
					}
					if s.Path == web.RedocScript.Path && len(body) > len(s.Body)/2 {
						t.Errorf("the bundle compressed to %d bytes of %d", len(body), len(s.Body))
					}
					zr, err := gzip.NewReader(bytes.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					if body, err = io.ReadAll(zr); err != nil {
						t.Fatal(err)
					}
				}
				if !bytes.Equal(body, s.Body) {
					t.Errorf("gzip %v: the body is not the embedded script", gz)
				}
			}
		})
	}
}

// TestOpenAPIDocumentRefusal: past its per-IP limit the document is
// refused with a 429 the document itself lists.
func TestOpenAPIDocumentRefusal(t *testing.T) {
	t.Parallel()
	e := newPublicEcho(t, 1000)
	for range publicOpenAPI.perMinute {
		if rec := getFrom(e, "/v1/openapi.json", "192.0.2.4"); rec.Code != http.StatusOK {
			t.Fatalf("/v1/openapi.json within the limit: %d", rec.Code)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/openapi.json", nil)
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("X-Forwarded-For", "192.0.2.4")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("/v1/openapi.json past the limit: %d", rec.Code)
	}
	checkOpenAPI(t, req, nil, rec.Result(), rec.Body.Bytes())
}

// directives splits a Content-Security-Policy into its directives' source
// lists, and fails on a directive named twice.
func directives(t *testing.T, policy string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for d := range strings.SplitSeq(policy, ";") {
		f := strings.Fields(d)
		if len(f) == 0 {
			continue
		}
		if _, dup := out[f[0]]; dup {
			t.Errorf("Content-Security-Policy names %s twice", f[0])
		}
		out[f[0]] = f[1:]
	}
	return out
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}
