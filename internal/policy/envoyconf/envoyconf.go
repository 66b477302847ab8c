package envoyconf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/internal/limit"
	"github.com/tollgate/tollgate/internal/policy"
)

// Bounds on one uploaded file, so that parsing it, the Config every instance
// keeps and each match stay small whatever a tenant sends.
const (
	// MaxSource is the largest file Parse reads, in bytes.
	MaxSource = 64 << 10
	// MaxRules is the number of rate_limit blocks (unlimited ones included)
	// one file may hold.
	MaxRules = 1000
	// MaxDepth is how deep descriptors may nest: a descriptor of more
	// entries than this never matches a rule.
	MaxDepth = 8
	// MaxText is the length in bytes of the domain, a key, a value, a rule's
	// name and a name in replaces.
	MaxText = 256
	// MaxWildcards is the number of descriptors with a "*" in their key or
	// value one list may hold: each may be tried against every entry a
	// request sends at that level.
	MaxWildcards = 64
	// MaxNameLen is the longest policy name a rule gets; a longer one is
	// replaced by a digest of it (see Rule).
	MaxNameLen = 256
)

// Error is a file Parse refuses: the line at fault (1-based; 0 when the file
// as a whole is) and a reason meant for the tenant who uploaded it. It
// unwraps to ErrInvalid and policy.ErrInvalid.
type Error struct {
	Line   int
	Reason string
}

func (e *Error) Error() string {
	if e.Line <= 0 {
		return e.Reason
	}
	return "line " + strconv.Itoa(e.Line) + ": " + e.Reason
}

// Unwrap returns ErrInvalid and policy.ErrInvalid.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, policy.ErrInvalid} }

// ClientFault returns no field and the error's text, line included, for the
// HTTP layer to show.
func (e *Error) ClientFault() (field, reason string) { return "", e.Error() }

func errAt(n *yaml.Node, format string, args ...any) *Error {
	return &Error{Line: n.Line, Reason: fmt.Sprintf(format, args...)}
}

// Entry is one (key, value) pair of an Envoy rate limit descriptor.
type Entry struct {
	Key, Value string
}

// Rule is one rate_limit block of a file.
type Rule struct {
	// Policy is what Tollgate counts, valid as policy.Parse's policies are,
	// for a rule that is neither Deny nor Unlimited. Its Name is the rule's
	// id: "envoy:", the domain, ":", and the composite keys of the rule's
	// path (see Key) joined by "/", with "%", ":", "/" and unprintable
	// bytes escaped as %XX; one per rule of a domain, different across
	// domains, the same when the file is uploaded again, and never a
	// native policy's name (policy.ValidateName refuses ":"). A name longer
	// than MaxNameLen is "envoy:#" and a SHA-256 digest of it.
	Policy policy.Policy
	// Deny is a rule of requests_per_unit 0: every request is over the
	// limit, and there is nothing to count. Policy.Limit is 0, Policy.Window
	// the unit's, Policy.Shadow its shadow_mode.
	Deny bool
	// Unlimited is a rule of unlimited: true: Match never returns it.
	Unlimited bool
	// Name is the rate_limit's name, which replaces refers to; "" when none.
	Name string
	// Replaces are the names of the rules this one replaces.
	Replaces []string
	// Unit is the rate_limit's unit in lower case ("second" … "year"), ""
	// when the file gave a window and no unit.
	Unit string
	// Key is the rule's path as envoyproxy/ratelimit's statistics name it:
	// each level's key, "_" and its value when it has one, joined by ".":
	// "message_type_marketing.to_number".
	Key string
	// DetailedMetric is the descriptor's detailed_metric.
	DetailedMetric bool
	// Line is the line of the rate_limit block.
	Line int
}

// counts reports whether r has a counter.
func (r *Rule) counts() bool { return !r.Deny && !r.Unlimited }

// Config is one domain's parsed file. It is immutable, and safe for
// concurrent use.
type Config struct {
	// Domain is the file's domain.
	Domain string
	// Rules are the file's rate_limit blocks, in the file's order.
	Rules []*Rule
	root  node
}

// Policies returns the policies of the rules that count (neither Deny nor
// Unlimited), in the file's order.
func (c *Config) Policies() []policy.Policy {
	var ps []policy.Policy
	for _, r := range c.Rules {
		if r.counts() {
			ps = append(ps, r.Policy)
		}
	}
	return ps
}

// node is one descriptor of the file, or the file's top list.
type node struct {
	// children are the descriptors of the list under this one by composite
	// key: the key, or the key, "_" and the value.
	children map[string]*node
	// wildcards are the children whose composite key holds a "*", in the
	// file's order, which is the order they are tried in.
	wildcards []wildcard
	// rule is the descriptor's rate_limit, nil when none.
	rule *Rule
	// share is the composite key of a wildcard descriptor with
	// share_threshold: its matches count as one.
	share string
	line  int
}

// wildcard is a composite key with "*", split on them.
type wildcard struct {
	key   string
	parts []string
}

// Fields each mapping of the file may hold.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric",
		"value_to_metric", "share_threshold"}
	rateLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "window", "fail_mode", "scope"}
	replacesFields = []string{"name"}
	// refused are fields of envoyproxy/ratelimit's format Tollgate does not
	// take, and why.
	refused = map[string]string{
		"quota_mode": "quota_mode is not supported: Tollgate refuses a request when any of its descriptors is over its limit (all or nothing), and counts nothing for it",
		"metadata":   "metadata is not supported: Tollgate sends no dynamic metadata",
	}
	// home says where each field of the format belongs.
	home = homes()
)

func homes() map[string]string {
	h := map[string]string{"domain": "at the top of the file"}
	for _, f := range descriptorFields {
		h[f] = "in a descriptor"
	}
	for _, f := range rateLimitFields {
		h[f] = "in rate_limit"
	}
	return h
}

// Parse reads a file of envoyproxy/ratelimit's configuration format for the
// given domain (the one in the upload's URL, which the file's domain must
// repeat), with Tollgate's fields beside the format's in rate_limit:
// algorithm, window, fail_mode and scope, as policy.Parse reads them. Every
// error is an *Error.
func Parse(domain string, src []byte) (*Config, error) {
	if domain == "" || len(domain) > MaxText {
		return nil, &Error{Reason: fmt.Sprintf("the domain must be 1 to %d bytes", MaxText)}
	}
	if len(src) > MaxSource {
		return nil, &Error{Reason: fmt.Sprintf("the file must be at most %d bytes", MaxSource)}
	}
	doc, err := decode(src)
	if err != nil {
		return nil, err
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, errAt(root, "the file must be a mapping with domain and descriptors")
	}
	f, err := fields(root, rootFields)
	if err != nil {
		return nil, err
	}
	dn, ok := f["domain"]
	if !ok {
		return nil, errAt(root, "domain is required")
	}
	fileDomain, err := text(dn.value, "domain")
	if err != nil {
		return nil, err
	}
	if fileDomain != domain {
		return nil, errAt(dn.value, "the file's domain %q is not the domain %q it is uploaded to", fileDomain, domain)
	}
	p := &parser{domain: domain, names: map[string]bool{}}
	c := &Config{Domain: domain}
	if d, ok := f["descriptors"]; ok {
		if err := p.list(&c.root, d, nil, 1); err != nil {
			return nil, err
		}
	}
	for _, r := range p.replaces {
		if !p.names[r.Value] {
			return nil, errAt(r, "replaces names %q, which no rate_limit of this file is called", r.Value)
		}
	}
	c.Rules = p.rules
	return c, nil
}

// decode reads src as one YAML document holding something.
func decode(src []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Reason: "the file is empty: it needs a domain and descriptors"}
		}
		return nil, syntaxError(err)
	}
	if len(doc.Content) == 0 {
		return nil, &Error{Reason: "the file is empty: it needs a domain and descriptors"}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(err)
	default:
		return nil, errAt(&next, "the file must be one YAML document: remove the second")
	}
	return &doc, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns yaml.v3's message into an *Error with its line.
func syntaxError(err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Line: line, Reason: "not valid YAML: " + m[2]}
	}
	return &Error{Reason: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// field is one member of a mapping.
type field struct{ key, value *yaml.Node }

// fields returns the members of mapping m, refusing a member not in known,
// a member twice, aliases and merge keys.
func fields(m *yaml.Node, known []string) (map[string]field, error) {
	f := make(map[string]field, len(m.Content)/2)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind == yaml.AliasNode || v.Kind == yaml.AliasNode {
			return nil, errAt(k, "YAML aliases (*name) are not supported: write the text out")
		}
		switch {
		case k.Tag == "!!merge":
			return nil, errAt(k, "YAML merge keys (<<) are not supported: write the fields out")
		case k.Kind != yaml.ScalarNode:
			return nil, errAt(k, "a field's name must be text")
		}
		name := k.Value
		if _, dup := f[name]; dup {
			return nil, errAt(k, "%s repeats the field of line %d", name, f[name].key.Line)
		}
		if !slices.Contains(known, name) {
			return nil, errAt(k, "%s", unknown(name, known))
		}
		f[name] = field{k, v}
	}
	return f, nil
}

// unknown says what is wrong with a field name not in known: a field of
// the format Tollgate refuses, one in the wrong place, or a misspelling.
func unknown(name string, known []string) string {
	if why, ok := refused[name]; ok {
		return why
	}
	if where, ok := home[name]; ok {
		return fmt.Sprintf("%s belongs %s", name, where)
	}
	squash := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
	}
	for _, k := range known {
		if squash(k) == squash(name) {
			return fmt.Sprintf("unknown field %q: did you mean %q?", name, k)
		}
	}
	return fmt.Sprintf("unknown field %q: a mapping here holds %s", name, strings.Join(known, ", "))
}

// text reads a scalar as the text written: a string, a whole number or a
// boolean (the reference reads those as text too), "" for null. Floats
// and the rest are refused, as envoyproxy/ratelimit refuses them.
func text(n *yaml.Node, what string) (string, error) {
	if n.Kind == yaml.AliasNode {
		return "", errAt(n, "YAML aliases (*name) are not supported: write the text out")
	}
	if n.Kind != yaml.ScalarNode {
		return "", errAt(n, "%s must be text", what)
	}
	switch n.Tag {
	case "!!null":
		return "", nil
	case "!!str", "!!int", "!!bool", "!!timestamp":
		if len(n.Value) > MaxText {
			return "", errAt(n, "%s must be at most %d bytes", what, MaxText)
		}
		return n.Value, nil
	}
	return "", errAt(n, "%s must be text: quote it (%q)", what, n.Value)
}

// boolean reads true or false (or YAML 1.1's yes, no, on, off); null is
// false.
func boolean(n *yaml.Node, what string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, errAt(n, "%s must be true or false", what)
	}
	return b, nil
}

// parser holds what Parse learns across the file.
type parser struct {
	domain   string
	rules    []*Rule
	names    map[string]bool // the rules' names
	replaces []*yaml.Node    // every name in a replaces, checked at the end
}

// list reads the descriptors of the field d into parent's children, at
// depth depth (1 for the top list); path holds the composite keys above.
func (p *parser) list(parent *node, d field, path []string, depth int) error {
	if d.value.Tag == "!!null" {
		return nil
	}
	if d.value.Kind != yaml.SequenceNode {
		return errAt(d.value, "descriptors must be a list of descriptors (- key: …)")
	}
	for _, item := range d.value.Content {
		if depth > MaxDepth {
			return errAt(item, "descriptors nest at most %d deep", MaxDepth)
		}
		if err := p.descriptor(parent, item, path, depth); err != nil {
			return err
		}
	}
	return nil
}

// descriptor reads one descriptor of a list into parent.
func (p *parser) descriptor(parent *node, item *yaml.Node, path []string, depth int) error {
	if item.Kind != yaml.MappingNode {
		return errAt(item, "a descriptor must be a mapping with a key (- key: …)")
	}
	f, err := fields(item, descriptorFields)
	if err != nil {
		return err
	}
	var key, value string
	if k, ok := f["key"]; ok {
		if key, err = text(k.value, "key"); err != nil {
			return err
		}
	}
	if key == "" {
		return errAt(item, "key is required")
	}
	if v, ok := f["value"]; ok {
		if value, err = text(v.value, "value"); err != nil {
			return err
		}
	}
	// The reference keeps descriptors by key, or key "_" value, so two
	// that join to the same text are one.
	composite := key
	if value != "" {
		composite += "_" + value
	}
	if prev, dup := parent.children[composite]; dup {
		if value != "" || strings.Contains(key, "_") {
			return errAt(item, "descriptor %q repeats the one of line %d (a key and its value are joined by \"_\")", composite, prev.line)
		}
		return errAt(item, "descriptor %q repeats the one of line %d", composite, prev.line)
	}
	n := &node{line: item.Line}
	wild := strings.Contains(composite, "*")
	if wild {
		if len(parent.wildcards) == MaxWildcards {
			return errAt(item, "a list may hold at most %d descriptors with a \"*\"", MaxWildcards)
		}
		parent.wildcards = append(parent.wildcards, wildcard{key: composite, parts: strings.Split(composite, "*")})
	}
	flags := map[string]bool{}
	for _, name := range []string{"shadow_mode", "detailed_metric", "value_to_metric", "share_threshold"} {
		if fl, ok := f[name]; ok {
			if flags[name], err = boolean(fl.value, name); err != nil {
				return err
			}
		}
	}
	if flags["share_threshold"] {
		if !wild {
			return errAt(f["share_threshold"].key, "share_threshold shares one limit among the values a \"*\" matches: this descriptor has no \"*\"")
		}
		n.share = composite
	}
	path = append(path[:len(path):len(path)], composite)
	if rl, ok := f["rate_limit"]; ok {
		if n.rule, err = p.rateLimit(rl, path, flags["shadow_mode"]); err != nil {
			return err
		}
		n.rule.DetailedMetric = flags["detailed_metric"]
	}
	if sub, ok := f["descriptors"]; ok {
		n.children = map[string]*node{}
		if err := p.list(n, sub, path, depth+1); err != nil {
			return err
		}
	}
	if parent.children == nil {
		parent.children = map[string]*node{}
	}
	parent.children[composite] = n
	return nil
}

// units are the reference's units (the Unit enum of Envoy's rate limit
// service, read upper-cased) and Tollgate's windows for them; year has
// none.
var units = map[string]limit.Window{
	"SECOND": limit.Every(time.Second),
	"MINUTE": limit.Every(time.Minute),
	"HOUR":   limit.Every(time.Hour),
	"DAY":    limit.Every(24 * time.Hour),
	"WEEK":   limit.Every(7 * 24 * time.Hour),
	"MONTH":  limit.Month,
	"YEAR":   {},
}

// rateLimit reads the rate_limit block rl of the descriptor at path.
func (p *parser) rateLimit(rl field, path []string, shadow bool) (*Rule, error) {
	if rl.value.Tag == "!!null" {
		return nil, errAt(rl.key, "rate_limit is empty: give unit and requests_per_unit, or unlimited: true")
	}
	if rl.value.Kind != yaml.MappingNode {
		return nil, errAt(rl.value, "rate_limit must be a mapping (unit, requests_per_unit, …)")
	}
	if len(p.rules) == MaxRules {
		return nil, errAt(rl.key, "a file may hold at most %d rate_limit blocks", MaxRules)
	}
	f, err := fields(rl.value, rateLimitFields)
	if err != nil {
		return nil, err
	}
	r := &Rule{Key: strings.Join(path, "."), Line: rl.key.Line}
	r.Policy = policy.Default(ruleName(p.domain, path))
	r.Policy.Shadow = shadow
	if u, ok := f["unlimited"]; ok {
		if r.Unlimited, err = boolean(u.value, "unlimited"); err != nil {
			return nil, err
		}
	}
	if err := p.naming(r, f); err != nil {
		return nil, err
	}
	if r.Unlimited {
		// The reference refuses a unit beside unlimited only when the unit
		// is valid, and ignores requests_per_unit: both are mistakes.
		if x, ok := first(f, "unit", "requests_per_unit", "algorithm", "window", "fail_mode", "scope"); ok {
			return nil, errAt(x.key, "an unlimited rule has no %s", x.key.Value)
		}
		p.rules = append(p.rules, r)
		return r, nil
	}
	windowAt, err := window(r, f, rl)
	if err != nil {
		return nil, err
	}
	rpu, ok := f["requests_per_unit"]
	if !ok {
		// The reference reads a missing requests_per_unit as 0, a rule that
		// refuses everything: too much for an omission.
		return nil, errAt(rl.key, "requests_per_unit is required (0 refuses every request)")
	}
	var n int64
	if rpu.value.Kind != yaml.ScalarNode || rpu.value.Tag != "!!int" || rpu.value.Decode(&n) != nil || n < 0 || n > limit.MaxLimit {
		return nil, errAt(rpu.value, "requests_per_unit must be an integer from 0 to %d", limit.MaxLimit)
	}
	r.Policy.Limit = n
	if n == 0 {
		r.Deny = true
		if x, ok := first(f, "algorithm", "window", "fail_mode", "scope"); ok {
			return nil, errAt(x.key, "requests_per_unit 0 refuses every request and counts nothing: it takes no %s", x.key.Value)
		}
		p.rules = append(p.rules, r)
		return r, nil
	}
	if err := extras(&r.Policy, f); err != nil {
		return nil, err
	}
	// A calendar month has no constant length, which a sliding window and a
	// token bucket need.
	if r.Policy.Window.Month && r.Policy.Algorithm != limit.FixedWindow {
		return nil, errAt(windowAt, `a calendar month is counted only by algorithm "fixed_window": use window: 30d for the others`)
	}
	if err := limit.Validate(r.Policy.Algorithm, r.Policy.Limit, 1, r.Policy.Window); err != nil {
		// Unreachable while the checks above mirror limit.Validate; kept so
		// that every rule Parse accepts is one the counters accept.
		return nil, errAt(rl.key, "requests_per_unit, the window and the algorithm do not combine")
	}
	p.rules = append(p.rules, r)
	return r, nil
}

// first returns the field of f, among names, that comes first in the file.
func first(f map[string]field, names ...string) (field, bool) {
	var found field
	for _, name := range names {
		if x, ok := f[name]; ok && (found.key == nil || x.key.Line < found.key.Line) {
			found = x
		}
	}
	return found, found.key != nil
}

// naming reads a rate_limit's name and replaces into r.
func (p *parser) naming(r *Rule, f map[string]field) error {
	var err error
	if n, ok := f["name"]; ok {
		if r.Name, err = text(n.value, "name"); err != nil {
			return err
		}
		if r.Name != "" {
			p.names[r.Name] = true
		}
	}
	rep, ok := f["replaces"]
	if !ok || rep.value.Tag == "!!null" {
		return nil
	}
	if rep.value.Kind != yaml.SequenceNode {
		return errAt(rep.value, "replaces must be a list of names (- name: …)")
	}
	for _, item := range rep.value.Content {
		if item.Kind != yaml.MappingNode {
			return errAt(item, "replaces must be a list of names (- name: …)")
		}
		rf, err := fields(item, replacesFields)
		if err != nil {
			return err
		}
		nf, ok := rf["name"]
		if !ok {
			return errAt(item, "a replaces entry must not be empty: give the name of the rule it replaces")
		}
		name, err := text(nf.value, "name")
		switch {
		case err != nil:
			return err
		case name == "":
			return errAt(nf.value, "a replaces entry must not be empty: give the name of the rule it replaces")
		case name == r.Name:
			return errAt(nf.value, "a rule cannot replace itself (%q)", name)
		}
		r.Replaces = append(r.Replaces, name)
		p.replaces = append(p.replaces, nf.value)
	}
	return nil
}

// window reads unit and window into r (window, when given, overrides unit)
// and returns the node that set the window.
func window(r *Rule, f map[string]field, rl field) (*yaml.Node, error) {
	var at *yaml.Node
	if u, ok := f["unit"]; ok {
		s, err := text(u.value, "unit")
		if err != nil {
			return nil, err
		}
		// As the reference reads it: upper-cased, then the enum's names
		// but UNKNOWN.
		w, ok := units[strings.ToUpper(s)]
		if !ok {
			return nil, errAt(u.value, "unit must be second, minute, hour, day, week, month or year, not %q", s)
		}
		r.Unit, r.Policy.Window, at = strings.ToLower(strings.ToUpper(s)), w, u.value
	}
	if wf, ok := f["window"]; ok {
		s, err := text(wf.value, "window")
		if err != nil {
			return nil, err
		}
		if r.Policy.Window, err = limit.ParseWindow(s); err != nil || r.Policy.Window.Billing {
			// A billing period is a policy's (PUT /v1/policies): a domain's
			// rules are not loaded with the tenant's billing anchor.
			return nil, errAt(wf.value, `window must be a duration from "1s" to "720h" (such as "1m" or "15m"), "1d" to "30d", or "month" ("billing" is for policies: use descriptors ("policy", NAME) to count one)`)
		}
		at = wf.value
	}
	switch {
	case at == nil:
		return nil, errAt(rl.key, "unit is required (second, minute, hour, day, week or month), or a window")
	case r.Policy.Window == limit.Window{}:
		return nil, errAt(at, "unit year (365 days) is longer than Tollgate's longest window, 30 days: use unit month, or add window: 30d or window: month")
	}
	return at, nil
}

// extras reads Tollgate's own fields of a rate_limit into pol, and checks
// that the policy counts.
func extras(pol *policy.Policy, f map[string]field) error {
	if a, ok := f["algorithm"]; ok {
		s, err := text(a.value, "algorithm")
		if err != nil {
			return err
		}
		alg, err := limit.ParseAlgorithm(s)
		if err != nil || alg == limit.Concurrency {
			return errAt(a.value, `algorithm must be "fixed_window", "sliding_window" or "token_bucket"`)
		}
		pol.Algorithm = alg
	}
	if m, ok := f["fail_mode"]; ok {
		s, err := text(m.value, "fail_mode")
		if err != nil {
			return err
		}
		if pol.FailMode = policy.FailMode(s); pol.FailMode != policy.FailOpen && pol.FailMode != policy.FailClosed {
			return errAt(m.value, `fail_mode must be "open" or "closed"`)
		}
	}
	if s, ok := f["scope"]; ok {
		v, err := text(s.value, "scope")
		if err != nil {
			return err
		}
		if pol.Scope = policy.Scope(v); pol.Scope != policy.ScopeSubject && pol.Scope != policy.ScopeGlobal {
			return errAt(s.value, `scope must be "subject" or "global"`)
		}
	}
	return nil
}

// ruleName is the policy name of the rule at path in domain (see Rule).
func ruleName(domain string, path []string) string {
	var b strings.Builder
	b.WriteString("envoy:")
	b.WriteString(escape(domain, ":/"))
	b.WriteByte(':')
	for i, k := range path {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(escape(k, ":/"))
	}
	if b.Len() <= MaxNameLen {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "envoy:#" + hex.EncodeToString(sum[:])
}
