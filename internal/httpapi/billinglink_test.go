package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/counter"
	"github.com/tollgate/tollgate/internal/counter/memory"
	"github.com/tollgate/tollgate/internal/gate"
)

// portalCounter is the real billing service, counting the portal sessions
// asked of Stripe.
type portalCounter struct {
	BillingService
	calls atomic.Int64
}

func (p *portalCounter) Portal(ctx context.Context, tenantID, returnURL string) (string, error) {
	p.calls.Add(1)
	return p.BillingService.Portal(ctx, tenantID, returnURL)
}

// get sends GET target from the client at ip.
func (in *billingInstance) get(target, ip string) answer {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	req.RemoteAddr = net.JoinHostPort(ip, "41000")
	rec := httptest.NewRecorder()
	in.e.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// linkPath is the path of the billing link billingURL makes for tenant.
func linkPath(tenant string) string {
	link := (&api{cfg: Config{PublicURL: "https://tollgate.example", BillingKey: []byte("billing-key-for-tests")}}).billingURL(tenant)
	return strings.TrimPrefix(link, "https://tollgate.example")
}

// TestBillingLinkWithoutExpiryIsRefused: a link of the form that never
// expired (tenant id and MAC alone), signed with the right key, opens
// nothing.
func TestBillingLinkWithoutExpiryIsRefused(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(true, true)
	tenant := w.tenant()
	outcome(t, in.post(checkoutJSON("evt_ck", time.Now(), tenant, "cus_old", "sub_old"), webhookSecret, time.Time{}))
	m := hmac.New(sha256.New, []byte("billing-key-for-tests"))
	m.Write([]byte("billing-portal:" + tenant))
	old := "/billing/portal/" + tenant + "." + hex.EncodeToString(m.Sum(nil)[:16])
	wantProblem(t, in.get(old, "198.51.100.7"), http.StatusNotFound, "not-found")
}

// TestBillingLinkOpensAreLimited: each open of a billing link is a Stripe
// call, so opens are limited per tenant and per client IP; refused opens
// cost no call.
func TestBillingLinkOpensAreLimited(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	var pc *portalCounter
	in := w.instance(true, true, func(c *Config) {
		pc = &portalCounter{BillingService: c.Billing}
		c.Billing = pc
	})
	var tenants []string
	for i := range 4 {
		tn := w.tenant()
		outcome(t, in.post(checkoutJSON("evt_ck"+string(rune('a'+i)), time.Now(), tn, "cus_"+string(rune('a'+i)), "sub_"+string(rune('a'+i))), webhookSecret, time.Time{}))
		tenants = append(tenants, tn)
	}
	// One tenant's link, from ever new addresses: the tenant's limit.
	link := linkPath(tenants[0])
	var opened, refused int
	for i := range 3 * BillingLinksPerTenant {
		a := in.get(link, "203.0.113."+strconv.Itoa(i+1))
		switch a.status {
		case http.StatusSeeOther:
			opened++
		case http.StatusTooManyRequests:
			refused++
			if ra := a.header.Get("Retry-After"); ra == "" || ra == "0" {
				t.Errorf("429 with Retry-After %q", ra)
			}
		default:
			t.Fatalf("open %d: %d %s", i, a.status, a.body)
		}
	}
	if opened != BillingLinksPerTenant || pc.calls.Load() != BillingLinksPerTenant {
		t.Errorf("one tenant's link: %d opened, %d refused, %d portal calls; want %d opened and as many calls", opened, refused, pc.calls.Load(), BillingLinksPerTenant)
	}
	// Other tenants' links from one address: the address's limit.
	opened = 0
	for i := range BillingLinksPerIP + 5 {
		if a := in.get(linkPath(tenants[1+i%3]), "198.51.100.9"); a.status == http.StatusSeeOther {
			opened++
		}
	}
	if opened != BillingLinksPerIP {
		t.Errorf("one address, three tenants: %d opened, want %d", opened, BillingLinksPerIP)
	}
}

// TestBillingLinkLimitsHoldAcrossInstances: with the shared counter store,
// opens on two instances count against one limit.
func TestBillingLinkLimitsHoldAcrossInstances(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	shared := memory.New(memory.Config{})
	t.Cleanup(func() { shared.Close() })
	a := w.instance(true, true, func(c *Config) { c.LinkLimiter = gate.NewLimiter("billing link limits", shared, nil, nil) })
	b := w.instance(true, true, func(c *Config) { c.LinkLimiter = gate.NewLimiter("billing link limits", shared, nil, nil) })
	tenant := w.tenant()
	outcome(t, a.post(checkoutJSON("evt_ck", time.Now(), tenant, "cus_x", "sub_x"), webhookSecret, time.Time{}))
	opened := 0
	for i := range 2 * BillingLinksPerTenant {
		in := a
		if i%2 == 1 {
			in = b
		}
		if in.get(linkPath(tenant), "203.0.113."+strconv.Itoa(i+1)).status == http.StatusSeeOther {
			opened++
		}
	}
	if opened != BillingLinksPerTenant {
		t.Errorf("opens over two instances: %d, want %d", opened, BillingLinksPerTenant)
	}
}

// TestRefusedBillingLinksAnswerAlike: a forged or expired link answers the
// same, to the byte, whether or not its tenant has a Stripe customer, and
// looks nothing up (no portal is asked for, no limit is counted).
func TestRefusedBillingLinksAnswerAlike(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	var pc *portalCounter
	in := w.instance(true, true, func(c *Config) {
		pc = &portalCounter{BillingService: c.Billing}
		c.Billing = pc
	})
	paying, never := w.tenant(), w.tenant()
	outcome(t, in.post(checkoutJSON("evt_ck", time.Now(), paying, "cus_p", "sub_p"), webhookSecret, time.Time{}))
	key := []byte("billing-key-for-tests")
	links := func(tenant string) map[string]string {
		valid := signPortalToken(key, tenant, time.Now().Add(time.Hour))
		return map[string]string{
			"expired":        signPortalToken(key, tenant, time.Now().Add(-time.Second)),
			"forged":         signPortalToken([]byte("a key we do not hold"), tenant, time.Now().Add(time.Hour)),
			"altered expiry": strings.Replace(valid, ".", ".9", 1),
		}
	}
	never1, paying1 := links(never), links(paying)
	for name := range never1 {
		// Many times over: a refused link is never counted either.
		for range 2 * BillingLinksPerIP {
			x, y := in.get("/billing/portal/"+never1[name], "192.0.2.50"), in.get("/billing/portal/"+paying1[name], "192.0.2.50")
			if x.status != http.StatusNotFound || x.status != y.status || string(x.body) != string(y.body) || fmt.Sprint(x.header) != fmt.Sprint(y.header) {
				t.Fatalf("%s: without a customer %d %s %v; with one %d %s %v; want the same 404", name, x.status, x.body, x.header, y.status, y.body, y.header)
			}
		}
	}
	if n := pc.calls.Load(); n != 0 {
		t.Errorf("refused links asked for %d portal sessions, want 0", n)
	}
	// The address was never counted: a valid link still opens from it.
	if a := in.get(linkPath(paying), "192.0.2.50"); a.status != http.StatusSeeOther {
		t.Errorf("a valid link after refused ones: %d %s", a.status, a.body)
	}
}

// TestBillingLinkLimitKeysIPv6ByNetwork: a client rotating through the
// addresses of its /64 is one client.
func TestBillingLinkLimitKeysIPv6ByNetwork(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	in := w.instance(true, true)
	var tenants []string
	for i := range 3 {
		tn := w.tenant()
		id := "v6" + strconv.Itoa(i)
		outcome(t, in.post(checkoutJSON("evt_"+id, time.Now(), tn, "cus_"+id, "sub_"+id), webhookSecret, time.Time{}))
		tenants = append(tenants, tn)
	}
	opened := 0
	for i := range BillingLinksPerIP + 5 {
		if in.get(linkPath(tenants[i%3]), "2001:db8:7:9:"+strconv.FormatInt(int64(i+1), 16)+"::1").status == http.StatusSeeOther {
			opened++
		}
	}
	if opened != BillingLinksPerIP {
		t.Errorf("one /64, rotating addresses: %d opened, want %d", opened, BillingLinksPerIP)
	}
	// Another network is another client.
	if a := in.get(linkPath(tenants[0]), "2001:db8:7:a::1"); a.status != http.StatusSeeOther {
		t.Errorf("from another /64: %d %s, want 303", a.status, a.body)
	}
}

// TestBillingLinkFormsSurviveUpgrades: a link signed before an upgrade
// opens after it, and the opens counted before it still count: the token's
// MAC and the per-IP counter key are what earlier versions made.
func TestBillingLinkFormsSurviveUpgrades(t *testing.T) {
	t.Parallel()
	key := []byte("billing-key-for-tests")
	mac := func(in string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(in))
		return m.Sum(nil)[:16]
	}
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	secs := strconv.FormatInt(exp.Unix(), 10)
	old := "t1." + secs + "." + hex.EncodeToString(mac("tollgate billing portal link\x00t1\x00"+secs))
	if got := signPortalToken(key, "t1", exp); got != old {
		t.Errorf("token %s, want %s", got, old)
	}
	if id, ok := verifyPortalToken(key, old, time.Now()); !ok || id != "t1" {
		t.Errorf("a token of the earlier form: %q, %v", id, ok)
	}
	l := newLinkLimits(Config{BillingKey: key})
	ip := netip.MustParseAddr("203.0.113.9")
	if got, want := l.ipKey(ip), "ip:"+hex.EncodeToString(mac("tollgate billing link client\x00203.0.113.9")); got != want {
		t.Errorf("per-IP key %s, want %s", got, want)
	}
	if got, want := l.ipKey(netip.Addr{}), "ip:"+hex.EncodeToString(mac("tollgate billing link client\x00unknown")); got != want {
		t.Errorf("unresolved client's key %s, want %s", got, want)
	}
}

// TestBillingLinkLimitsWithoutAStoreRefuse: with neither a shared nor a
// local store to count in, an open is not let through uncounted: it is a
// store outage (503), not a free call to Stripe.
func TestBillingLinkLimitsWithoutAStoreRefuse(t *testing.T) {
	t.Parallel()
	l := newLinkLimits(Config{BillingKey: []byte("billing-key-for-tests")})
	if _, err := l.admit(t.Context(), "t1", netip.MustParseAddr("203.0.113.9")); !errors.Is(err, counter.ErrUnavailable) {
		t.Errorf("admit with no store: %v, want counter.ErrUnavailable", err)
	}
}

// TestBillingLinkLandsWhereTheLandingSays: a verified link of a tenant the
// landing knows (one with console members) goes there, however often it is
// opened, with no portal call; a tenant it does not know opens the portal
// under the limits; a landing that fails is a 500; a forged link is 404
// without asking the landing.
func TestBillingLinkLandsWhereTheLandingSays(t *testing.T) {
	t.Parallel()
	w := newBillingWorld(t)
	withMembers, without := w.tenant(), w.tenant()
	var asked atomic.Int64
	var pc *portalCounter
	in := w.instance(true, true, func(c *Config) {
		pc = &portalCounter{BillingService: c.Billing}
		c.Billing = pc
		c.BillingLanding = func(_ context.Context, tenantID string) (string, error) {
			asked.Add(1)
			switch tenantID {
			case withMembers:
				return "/console/billing?workspace=" + tenantID, nil
			case without:
				return "", nil
			}
			return "", errors.New("members store down")
		}
	})
	outcome(t, in.post(checkoutJSON("evt_ck_land", time.Now(), without, "cus_land", "sub_land"), webhookSecret, time.Time{}))

	for i := range BillingLinksPerTenant + 5 {
		a := in.get(linkPath(withMembers), "198.51.100.7")
		if a.status != http.StatusSeeOther || a.header.Get("Location") != "/console/billing?workspace="+withMembers {
			t.Fatalf("open %d of a console tenant's link: %d, Location %q", i+1, a.status, a.header.Get("Location"))
		}
	}
	if n := pc.calls.Load(); n != 0 {
		t.Errorf("%d portal calls for links that land in the console, want 0", n)
	}
	if a := in.get(linkPath(without), "198.51.100.7"); a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), "http") || pc.calls.Load() != 1 {
		t.Errorf("a tenant without members: %d, Location %q, %d portal calls; want 303 to the portal, 1 call", a.status, a.header.Get("Location"), pc.calls.Load())
	}
	wantProblem(t, in.get(linkPath("00000000-0000-0000-0000-00000000dead"), "198.51.100.7"), http.StatusInternalServerError, "internal-error")
	before := asked.Load()
	forged := linkPath(withMembers)
	forged = forged[:len(forged)-1] + map[bool]string{true: "1", false: "0"}[strings.HasSuffix(forged, "0")]
	wantProblem(t, in.get(forged, "198.51.100.7"), http.StatusNotFound, "not-found")
	if asked.Load() != before {
		t.Error("a forged link was looked up")
	}
}
