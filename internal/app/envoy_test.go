package app_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/pgstore"
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// TestEnvoyDomainsReachEveryInstance: a file uploaded to one instance's API
// is in that instance's EnvoyDomains at once, and in another instance's on
// the same database within the change notification's delay; so is its
// deletion.
func TestEnvoyDomainsReachEveryInstance(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.New(t)
	var apps [2]*app.App
	for i := range apps {
		a, err := app.New(t.Context(), config(), app.Deps{DSN: dsn})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Shutdown() })
		apps[i] = a
	}
	live, key, err := tenant.NewKey(false)
	if err != nil {
		t.Fatal(err)
	}
	tn, err := pgstore.NewTenants(apps[0].Pool).CreateTenant(ctx, "Acme", tenant.PlanPro, key)
	if err != nil {
		t.Fatal(err)
	}
	// The second instance knows the tenant has no file before the upload.
	for _, a := range apps {
		if ds, err := a.EnvoyDomains().For(ctx, tn.ID); err != nil || ds.Len() != 0 {
			t.Fatalf("before the upload: %d domains, %v", ds.Len(), err)
		}
	}
	send := func(method, body string) {
		t.Helper()
		req := httptest.NewRequest(method, "/v1/envoy/domains/edge", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+live)
		req.Header.Set("Content-Type", "application/yaml")
		rec := httptest.NewRecorder()
		apps[0].Echo.ServeHTTP(rec, req)
		if rec.Code >= 300 {
			t.Fatalf("%s: %d %s", method, rec.Code, rec.Body)
		}
	}
	has := func(a *app.App) bool {
		ds, err := a.EnvoyDomains().For(ctx, tn.ID)
		_, ok := ds.Lookup("edge")
		return err == nil && ok
	}
	send(http.MethodPut, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	if !has(apps[0]) {
		t.Error("the instance that took the upload does not serve it at once")
	}
	took := eventually.True(t, 10*time.Second, "the upload on the other instance", func() bool { return has(apps[1]) })
	t.Logf("the upload reached the other instance in %s", took)
	send(http.MethodDelete, "")
	if has(apps[0]) {
		t.Error("the instance that took the deletion still serves the file")
	}
	eventually.True(t, 10*time.Second, "the deletion on the other instance", func() bool { return !has(apps[1]) })
}
