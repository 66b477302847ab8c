package blackbox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/internal/testkit/bintest"
	"github.com/tollgate/tollgate/internal/testkit/eventually"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// startWithGRPC starts an instance with its rate limit service on a port of
// its own.
func startWithGRPC(t *testing.T, dsn string, extra ...string) *instance {
	t.Helper()
	addr := bintest.FreePort(t)
	in := start(t, dsn, append(extra, "TOLLGATE_GRPC_ADDR="+addr)...)
	in.grpc = addr
	return in
}

// shouldRateLimit asks in's rate limit service as Envoy would, one native
// descriptor (policy, subject), with key.
func shouldRateLimit(t *testing.T, in *instance, key, policy, subject string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(in.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key), 15*time.Second)
	defer cancel()
	return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "disable", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "policy", Value: policy}, {Key: "subject", Value: subject}}}}})
}

// problemType is the type of an answer's problem body, "" when it has none.
func problemType(c call) string {
	if c.header.Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(c.body, &p)
	return p.Type
}

const tenantDisabledType = "https://tollgate.dev/problems/tenant-disabled"

// TestDisabledTenantRefusedOnEveryInstance: two instances on one
// PostgreSQL; tenant A's keys check on both (REST, gRPC, forward auth);
// the operator disables A with the CLI; each instance refuses A's keys with
// 403 tenant-disabled (gRPC PERMISSION_DENIED) within seconds, on every way
// in, while tenant B is answered throughout; an unknown key is still 401,
// and so is a revoked key of A; the Go client, fail-open, gets an error
// (client.ErrTenantDisabled) and a Decision that allows nothing; enabling
// gives A's keys back, with its counters as they were.
func TestDisabledTenantRefusedOnEveryInstance(t *testing.T) {
	t.Parallel()
	dsn := pgtest.New(t)
	a, b := startWithGRPC(t, dsn), startWithGRPC(t, dsn)
	ins := []*instance{a, b}
	ta, tb := createTenant(t, dsn, "pro"), createTenant(t, dsn, "pro")
	var spare struct {
		KeyID string `json:"key_id"`
		Key   string `json:"key"`
	}
	cli(t, dsn, &spare, "keys", "create", "--tenant", ta.TenantID)
	putPolicy(t, a, ta.LiveKey, "api", map[string]any{"limit": 10, "window": "1h"})
	putPolicy(t, a, tb.LiveKey, "api", map[string]any{"limit": 1000, "window": "1h"})
	item := map[string]any{"policy": "api", "subject": "alice"}

	// Four of A's ten used: two checks on a, one on b, one through b's gRPC.
	for _, in := range []*instance{a, a, b} {
		if c := check(t, in, ta.LiveKey, item); c.status != 200 {
			t.Fatalf("A's check on %s before: %d %s", in.base, c.status, c.body)
		}
	}
	if res, err := shouldRateLimit(t, b, ta.LiveKey, "api", "alice"); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("A's ShouldRateLimit before: %v, %v", res, err)
	}
	if c := do(t, "GET", a.base+"/v1/forward-auth/api", ta.LiveKey, nil); c.status != 200 {
		t.Fatalf("A's forward auth before: %d %s", c.status, c.body)
	}
	bOK := func(in *instance) {
		t.Helper()
		if c := check(t, in, tb.LiveKey, item); c.status != 200 {
			t.Fatalf("B's check on %s: %d %s", in.base, c.status, c.body)
		}
	}

	var st struct {
		TenantID   string  `json:"tenant_id"`
		DisabledAt *string `json:"disabled_at"`
		Reason     string  `json:"reason"`
	}
	cli(t, dsn, &st, "tenants", "disable", ta.TenantID, "--reason", "abuse report 17")
	if st.DisabledAt == nil || st.Reason != "abuse report 17" {
		t.Fatalf("tenants disable printed %+v", st)
	}
	// Each instance hears it through its own change listener. The poll
	// reads /v1/usage, which counts nothing, so that A's counters stay put.
	for _, in := range ins {
		took := eventually.True(t, 3*time.Second, "A refused on "+in.base, func() bool {
			bOK(in)
			return do(t, "GET", in.base+"/v1/usage", ta.LiveKey, nil).status == 403
		})
		t.Logf("the disable reached %s in %s", in.base, took)
	}
	for _, in := range ins {
		for name, c := range map[string]call{
			"check":              check(t, in, ta.LiveKey, item),
			"check, test key":    check(t, in, ta.TestKey, item),
			"batch":              do(t, "POST", in.base+"/v1/check/batch", ta.LiveKey, map[string]any{"checks": []any{map[string]any{"items": []any{item}}}}),
			"reservation":        do(t, "POST", in.base+"/v1/reservations", ta.LiveKey, map[string]any{"policy": "api", "subject": "alice", "amount": 1}),
			"policies":           do(t, "GET", in.base+"/v1/policies", ta.LiveKey, nil),
			"usage":              do(t, "GET", in.base+"/v1/usage", ta.LiveKey, nil),
			"forward auth":       do(t, "GET", in.base+"/v1/forward-auth/api", ta.LiveKey, nil),
			"forward auth (403)": do(t, "GET", in.base+"/v1/forward-auth/api?refusal_status=403", ta.LiveKey, nil),
		} {
			if c.status != 403 || problemType(c) != tenantDisabledType || !strings.Contains(string(c.body), "disabled by the operator") {
				t.Errorf("%s on %s: %d %s, want 403 %s", name, in.base, c.status, c.body, tenantDisabledType)
			}
			if strings.Contains(string(c.body), "abuse report") {
				t.Errorf("%s on %s shows the operator's reason: %s", name, in.base, c.body)
			}
		}
		_, err := shouldRateLimit(t, in, ta.LiveKey, "api", "alice")
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("A's ShouldRateLimit on %s: %v, want PermissionDenied", in.base, err)
		}
		if res, err := shouldRateLimit(t, in, tb.LiveKey, "api", "alice"); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("B's ShouldRateLimit on %s: %v, %v", in.base, res, err)
		}
		bOK(in)

		// An unknown key learns nothing: 401, as before.
		unknown := "tg_live_AAAAAAAAAAAA_" + strings.Repeat("A", 32)
		if c := check(t, in, unknown, item); c.status != 401 || problemType(c) == tenantDisabledType {
			t.Errorf("an unknown key on %s: %d %s, want 401", in.base, c.status, c.body)
		}
		if _, err := shouldRateLimit(t, in, unknown, "api", "alice"); status.Code(err) != codes.Unauthenticated {
			t.Errorf("an unknown key's ShouldRateLimit on %s: %v, want Unauthenticated", in.base, err)
		}
		// A key of A whose secret is wrong: 401 too.
		wrong := spare.Key[:strings.LastIndexByte(spare.Key, '_')+1] + strings.Repeat("B", 32)
		if c := check(t, in, wrong, item); c.status != 401 {
			t.Errorf("A's key prefix with a wrong secret on %s: %d %s, want 401", in.base, c.status, c.body)
		}

		// The Go client, fail-open: an error, never an allow.
		for name, c := range map[string]*client.Client{
			"open":   newClient(t, in.base, ta.LiveKey, client.WithFailMode(client.FailOpen)),
			"closed": newClient(t, in.base, ta.LiveKey, client.WithFailMode(client.FailClosed)),
		} {
			d, err := c.Check(context.Background(), client.Item{Policy: "api", Subject: "alice"})
			var ae *client.APIError
			if !errors.Is(err, client.ErrTenantDisabled) || errors.Is(err, client.ErrUnavailable) || !errors.As(err, &ae) || ae.Status != 403 || d.Allowed || d.Degraded {
				t.Errorf("the Go client (fail-%s) on %s: %+v, %v; want client.ErrTenantDisabled and nothing allowed", name, in.base, d, err)
			}
		}
	}

	// A revoked key of the disabled tenant: 401, not 403.
	cli(t, dsn, nil, "keys", "revoke", spare.KeyID)
	for _, in := range ins {
		eventually.True(t, 3*time.Second, "A's revoked key refused with 401 on "+in.base, func() bool {
			return do(t, "GET", in.base+"/v1/usage", spare.Key, nil).status == 401
		})
	}

	cli(t, dsn, &st, "tenants", "enable", ta.TenantID)
	if st.DisabledAt != nil {
		t.Fatalf("tenants enable printed %+v", st)
	}
	for _, in := range ins {
		eventually.True(t, 3*time.Second, "A answered again on "+in.base, func() bool {
			bOK(in)
			return do(t, "GET", in.base+"/v1/usage", ta.LiveKey, nil).status == 200
		})
	}
	// The counters are as they were: four used, this is the fifth.
	var ans checkAnswer
	c := check(t, b, ta.LiveKey, item)
	c.json(t, &ans)
	if c.status != 200 || !ans.Allowed || ans.Items[0].Remaining != 5 {
		t.Fatalf("A's check after enabling: %d %s, want allowed with 5 remaining", c.status, c.body)
	}
	if res, err := shouldRateLimit(t, a, ta.LiveKey, "api", "alice"); err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("A's ShouldRateLimit after enabling: %v, %v", res, err)
	}
	if c := do(t, "GET", a.base+"/v1/policies/api", ta.LiveKey, nil); c.status != 200 || !strings.Contains(string(c.body), `"limit":10`) {
		t.Fatalf("A's policy after enabling: %d %s", c.status, c.body)
	}
	if c := do(t, "GET", a.base+"/v1/usage", spare.Key, nil); c.status != 401 {
		t.Fatalf("the revoked key after enabling: %d, want 401", c.status)
	}
}
