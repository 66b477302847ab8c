package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

var openAPI struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

// openAPIRouter loads and validates openapi.json once per test binary.
func openAPIRouter(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	openAPI.once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(openAPIDocument)
		if err != nil {
			openAPI.err = fmt.Errorf("load: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			openAPI.err = fmt.Errorf("validate: %w", err)
			return
		}
		openAPI.doc = doc
		openAPI.router, openAPI.err = gorillamux.NewRouter(doc)
	})
	if openAPI.err != nil {
		t.Fatalf("openapi.json: %v", openAPI.err)
	}
	return openAPI.doc, openAPI.router
}

// checkOpenAPI fails t when a request and the answer the handlers gave it
// disagree with openapi.json:
//
//   - the route (path and method) must be in the document;
//   - the answer (status, content type, body, declared headers) must be one
//     the document lists for that operation;
//   - the request must satisfy the document (parameters, body, bearer
//     auth) whenever the answer is not an error: a server that accepts what
//     the document forbids, or a document that forbids what the server
//     accepts, is a bug either way. A request refused with 4xx may break
//     the document, as tests of bad input do on purpose.
//
// reqBody and respBody are the bodies as sent and received (req.Body and
// resp.Body are not read).
func checkOpenAPI(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	_, router := openAPIRouter(t)
	ctx := context.Background()
	r := req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := router.FindRoute(r)
	if err != nil {
		t.Errorf("openapi: %s %s: %v", req.Method, req.URL.Path, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    r,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:          true,
			SkipSettingDefaults: true,
			AuthenticationFunc:  bearerPresent,
		},
	}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && resp.StatusCode < 400 {
		t.Errorf("openapi: %s %s answered %d, but the document forbids the request: %v", req.Method, req.URL, resp.StatusCode, err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("openapi: the answer %d to %s %s breaks the document: %v\nbody: %s", resp.StatusCode, req.Method, req.URL, err, respBody)
	}
}

// bearerPresent checks the security schemes the document has: an
// Authorization header with a bearer token, or (forward auth only) Basic
// credentials. Whether the token is a valid key is the auth middleware's
// business, not the document's.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	want := map[string]string{"bearerAuth": "bearer", "basicKeyAuth": "basic"}[in.SecuritySchemeName]
	if want == "" {
		return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
	}
	scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, want) || token == "" {
		return fmt.Errorf("no %s credentials", want)
	}
	return nil
}
