package envoyconf_test

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

// The examples of envoyproxy/ratelimit's README, section "Configuration",
// each file as the README prints it and each request with what the README
// says of it (quoted). A rule is named by Rule.Key, the composite key path
// the reference's statistics use.

// want is what one descriptor should meet: the rule's Key ("" for none),
// its limit and window, and the flags.
type want struct {
	key       string
	limit     int64
	window    limit.Window
	deny      bool
	shadow    bool
	unlimited bool
	replaced  bool
}

func mustParse(t *testing.T, domain, src string) *envoyconf.Config {
	t.Helper()
	c, err := envoyconf.Parse(domain, []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func d(kv ...string) []envoyconf.Entry {
	es := make([]envoyconf.Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, envoyconf.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

func check(t *testing.T, what string, got envoyconf.Match, w want) {
	t.Helper()
	gotKey := ""
	if got.Rule != nil {
		gotKey = got.Rule.Key
	}
	if gotKey != w.key || got.Unlimited != w.unlimited || got.Replaced != w.replaced {
		t.Fatalf("%s: got rule %q unlimited %v replaced %v, want rule %q unlimited %v replaced %v",
			what, gotKey, got.Unlimited, got.Replaced, w.key, w.unlimited, w.replaced)
	}
	if got.Rule == nil {
		return
	}
	p := got.Rule.Policy
	if p.Limit != w.limit || p.Window != w.window || got.Rule.Deny != w.deny || p.Shadow != w.shadow {
		t.Fatalf("%s: got limit %d per %v deny %v shadow %v, want %d per %v deny %v shadow %v",
			what, p.Limit, p.Window, got.Rule.Deny, p.Shadow, w.limit, w.window, w.deny, w.shadow)
	}
}

var (
	perSecond = limit.Every(time.Second)
	perMinute = limit.Every(time.Minute)
	perHour   = limit.Every(time.Hour)
	perDay    = limit.Every(24 * time.Hour)
)

func TestReadmeExample1(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "mongo_cps", `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`)
	// "we setup 2 different rate limits in the top level descriptor list.
	// Each of the limits have the same key ("database"). They have a
	// different value ("users", and "default"), and each of them setup a 500
	// request per second rate limit."
	check(t, "database=users", c.Match(d("database", "users")), want{key: "database_users", limit: 500, window: perSecond})
	check(t, "database=default", c.Match(d("database", "default")), want{key: "database_default", limit: 500, window: perSecond})
	// No rule for another value: "unmatched descriptors are OK" (issue 39).
	check(t, "database=orders", c.Match(d("database", "orders")), want{})
	if len(c.Policies()) != 2 || c.Policies()[0].Name == c.Policies()[1].Name {
		t.Fatalf("got policies %+v, want two of different names", c.Policies())
	}
}

func TestReadmeExample2(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "messaging", `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`)
	// "("message_type", "marketing"),("to_number", "2061111111") and
	// ("message_type", "marketing"),("to_number", "2062222222") will each
	// get 5 requests per day."
	a := c.Match(d("message_type", "marketing", "to_number", "2061111111"))
	b := c.Match(d("message_type", "marketing", "to_number", "2062222222"))
	check(t, "marketing to 2061111111", a, want{key: "message_type_marketing.to_number", limit: 5, window: perDay})
	check(t, "marketing to 2062222222", b, want{key: "message_type_marketing.to_number", limit: 5, window: perDay})
	if a.Subject == b.Subject {
		t.Fatalf("two numbers share the subject %q: each must get its own 5 a day", a.Subject)
	}
	// "This one creates an overall limit for messages sent to any particular
	// number during a 1 day period. Thus, ("to_number", "2061111111") and
	// ("to_number", "2062222222") both get 100 requests per day."
	x := c.Match(d("to_number", "2061111111"))
	y := c.Match(d("to_number", "2062222222"))
	check(t, "to 2061111111", x, want{key: "to_number", limit: 100, window: perDay})
	check(t, "to 2062222222", y, want{key: "to_number", limit: 100, window: perDay})
	if x.Subject == y.Subject {
		t.Fatalf("two numbers share the subject %q", x.Subject)
	}
	// "The top level descriptor is ("message_type", "marketing"). However
	// this descriptor does not have a limit assigned so it's just a
	// placeholder."
	check(t, "marketing alone", c.Match(d("message_type", "marketing")), want{})
	// "the client could send this complete request ... And the service will
	// rate limit against _all_ matching rules and return an aggregate
	// result".
	all := c.MatchAll([][]envoyconf.Entry{
		d("message_type", "marketing", "to_number", "2061111111"),
		d("to_number", "2061111111"),
	})
	check(t, "request, first descriptor", all[0], want{key: "message_type_marketing.to_number", limit: 5, window: perDay})
	check(t, "request, second descriptor", all[1], want{key: "to_number", limit: 100, window: perDay})
}

func TestReadmeExample3(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "edge_proxy_per_ip", `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`)
	// "("remote_address", "50.0.0.1") for example. This IP would get 10
	// requests per second as would any other IP."
	check(t, "50.0.0.1", c.Match(d("remote_address", "50.0.0.1")), want{key: "remote_address", limit: 10, window: perSecond})
	// "If the descriptor ("remote_address", "50.0.0.5") is received, the
	// service will attempt the most specific match possible ... key/value is
	// always attempted as a match before just key." With 0 requests a
	// second, the black-listed address is refused every time.
	check(t, "50.0.0.5", c.Match(d("remote_address", "50.0.0.5")), want{key: "remote_address_50.0.0.5", window: perSecond, deny: true})
	if n := len(c.Policies()); n != 1 {
		t.Fatalf("got %d policies, want 1: a rule of 0 requests counts nothing", n)
	}
}

func TestReadmeExample4(t *testing.T) {
	t.Parallel()
	req := d("key", "value", "subkey", "subvalue")
	// "Would **not** match the following configuration. Even though the
	// first descriptor in the request matches the 1st level descriptor in
	// the configuration, the request has two tuples in the descriptor."
	flat := mustParse(t, "example4", `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`)
	check(t, "two tuples, one level", flat.Match(req), want{})
	// "However, it would match the following configuration"
	nested := mustParse(t, "example4", `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`)
	check(t, "two tuples, two levels", nested.Match(req), want{key: "key_value.subkey", limit: 300, window: perSecond})
}

func TestReadmeExample5(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "internal", `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`)
	// "The return value for unlimited descriptors will be an OK status code
	// with the LimitRemaining field set to MaxUint32 value": no rule to
	// count, and Unlimited says why.
	check(t, "ldap", c.Match(d("ldap", "anything")), want{unlimited: true})
	check(t, "azure", c.Match(d("azure", "x")), want{key: "azure", limit: 100, window: perMinute})
}

func TestReadmeExample6(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "example6", `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`)
	// "user-a of the auth-service would not get rate-limited regardless of
	// the rate of requests, there would however be statistics related to the
	// breach of the configured limit of 10 req / sec."
	check(t, "user-a", c.Match(d("service", "auth-service", "user", "user-a")),
		want{key: "service.user_user-a", limit: 10, window: perSecond, shadow: true})
	// "user-b would be limited to 20 req / sec however."
	check(t, "user-b", c.Match(d("service", "auth-service", "user", "user-b")),
		want{key: "service.user_user-b", limit: 20, window: perSecond})
}

func TestReadmeExample7(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "example7", `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`)
	one := d("key_1", "value_1", "user", "bkthomps")
	two := d("key_2", "value_2", "user", "bkthomps")
	five := want{key: "key_1_value_1.user_bkthomps", limit: 5, window: perSecond}
	ten := want{key: "key_2_value_2.user_bkthomps", limit: 10, window: perSecond}
	// "(key_1, value_1), (user, bkthomps): 5 / sec"
	check(t, "key_1 alone", c.MatchAll([][]envoyconf.Entry{one})[0], five)
	// "(key_2, value_2), (user, bkthomps): 10 / sec"
	check(t, "key_2 alone", c.MatchAll([][]envoyconf.Entry{two})[0], ten)
	// "(key_1, value_1), (key_2, value_2), (user, bkthomps): 10 / sec since
	// the (key_1, value_1), (user, bkthomps) rule was replaced" — a request
	// carrying both descriptors.
	both := c.MatchAll([][]envoyconf.Entry{one, two})
	check(t, "both, key_1", both[0], want{replaced: true})
	check(t, "both, key_2", both[1], ten)
	// Match alone knows nothing of the request's other descriptors.
	check(t, "Match of key_1", c.Match(one), five)
}

func TestReadmeExample8(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "example8", `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`)
	// "Rate limiting configuration and tracking works as normally":
	// "(key_1, unspecified_value): 10 / sec", "(key_1, value_1): 20 / sec".
	// The README's text says "/ sec" and "key_1"; its file says unit minute
	// and key1, and the file is what counts.
	a := c.Match(d("key1", "unspecified_value"))
	check(t, "unspecified_value", a, want{key: "key1", limit: 10, window: perMinute})
	check(t, "unspecified_value2", c.Match(d("key1", "unspecified_value2")), want{key: "key1", limit: 10, window: perMinute})
	check(t, "value1", c.Match(d("key1", "value1")), want{key: "key1_value1", limit: 20, window: perMinute})
	if !a.Rule.DetailedMetric {
		t.Fatal("got DetailedMetric false, want true")
	}
}

func TestReadmeExample9(t *testing.T) {
	t.Parallel()
	trailing := mustParse(t, "example9", `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`)
	// "Matches value1, value2, valueXYZ, etc."
	for _, v := range []string{"value1", "value2", "valueXYZ", "value"} {
		check(t, v, trailing.Match(d("key1", v)), want{key: "key1_value*", limit: 20, window: perMinute})
	}
	check(t, "valu", trailing.Match(d("key1", "valu")), want{})
	middle := mustParse(t, "example9", `
domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
`)
	// "Matches /api/123/action, /api/user-id/action. Does not match
	// /api/123/other."
	for _, v := range []string{"/api/123/action", "/api/user-id/action"} {
		check(t, v, middle.Match(d("path", v)), want{key: "path_/api/*/action", limit: 20, window: perMinute})
	}
	check(t, "/api/123/other", middle.Match(d("path", "/api/123/other")), want{})
	multiple := mustParse(t, "example9", `
domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
`)
	// "Matches /api/v1/resource/123/action, /api/v2/resource/456/action."
	for _, v := range []string{"/api/v1/resource/123/action", "/api/v2/resource/456/action"} {
		check(t, v, multiple.Match(d("route", v)), want{key: "route_/api/*/resource/*/action", limit: 20, window: perMinute})
	}
	check(t, "/api/v1/resource/action", multiple.Match(d("route", "/api/v1/resource/action")), want{})
	// Each matching value is counted apart (no share_threshold).
	if a, b := trailing.Match(d("key1", "value1")), trailing.Match(d("key1", "value2")); a.Subject == b.Subject {
		t.Fatalf("value1 and value2 share the subject %q", a.Subject)
	}
}

func TestReadmeExample10(t *testing.T) {
	t.Parallel()
	// value_to_metric names metrics only: "requests with different runtime
	// values for route and http_method will generate separate metrics"; the
	// limits are the same.
	c := mustParse(t, "example10", `
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
`)
	rule := want{key: "route.http_method.subject_id", limit: 60, window: perMinute}
	check(t, "api GET 123", c.Match(d("route", "api", "http_method", "GET", "subject_id", "123")), rule)
	check(t, "web POST 456", c.Match(d("route", "web", "http_method", "POST", "subject_id", "456")), rule)
	w := mustParse(t, "example10_wildcard", `
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
`)
	// "Request: user=alice, action=readfile, resource=documents"
	check(t, "alice readfile documents", w.Match(d("user", "alice", "action", "readfile", "resource", "documents")),
		want{key: "user.action_read*.resource", limit: 100, window: perMinute})
}

func TestReadmeExample11(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "example11", `
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
`)
	// "Requests for files/a.pdf, files/b.csv, and files/c.txt all share the
	// same threshold of 10 requests per hour": one counter, one subject.
	shared := want{key: "files_files/*", limit: 10, window: perHour}
	a, b, cc := c.Match(d("files", "files/a.pdf")), c.Match(d("files", "files/b.csv")), c.Match(d("files", "files/c.txt"))
	check(t, "files/a.pdf", a, shared)
	check(t, "files/b.csv", b, shared)
	check(t, "files/c.txt", cc, shared)
	if a.Subject != b.Subject || b.Subject != cc.Subject {
		t.Fatalf("got subjects %q, %q, %q, want one", a.Subject, b.Subject, cc.Subject)
	}
	// "Requests for files_no_share/a.pdf and files_no_share/b.csv each have
	// their own isolated threshold of 10 requests per hour"
	apart := want{key: "files_no_share_files_no_share/*", limit: 10, window: perHour}
	x, y := c.Match(d("files_no_share", "files_no_share/a.pdf")), c.Match(d("files_no_share", "files_no_share/b.csv"))
	check(t, "files_no_share/a.pdf", x, apart)
	check(t, "files_no_share/b.csv", y, apart)
	if x.Subject == y.Subject {
		t.Fatalf("got one subject %q, want one each", x.Subject)
	}
	m := mustParse(t, "example11_metrics", `
domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
`)
	// "Request: route=api/v1, method=GET": "all api/* routes share the same
	// threshold", per method.
	r1, r2, r3 := m.Match(d("route", "api/v1", "method", "GET")), m.Match(d("route", "api/v2", "method", "GET")),
		m.Match(d("route", "api/v1", "method", "POST"))
	nested := want{key: "route_api/*.method", limit: 60, window: perMinute}
	check(t, "api/v1 GET", r1, nested)
	check(t, "api/v2 GET", r2, nested)
	check(t, "api/v1 POST", r3, nested)
	if r1.Subject != r2.Subject || r1.Subject == r3.Subject {
		t.Fatalf("got subjects %q, %q, %q: want the first two equal, the third apart", r1.Subject, r2.Subject, r3.Subject)
	}
}
