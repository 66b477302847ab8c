package envoyconf_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/policy"
	"github.com/tollgate/tollgate/internal/policy/envoyconf"
)

func TestValidateDomain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, domain string
		reason       string // a part of the reason; "" when valid
	}{
		{"a plain name", "edge_proxy_per_ip", ""},
		{"the README's", "mongo_cps", ""},
		{"printable ASCII, escaped in a URL", "a b?c#d%e\\f.g~h", ""},
		{"dots within", "..a..", ""},
		{"255 bytes", strings.Repeat("d", 255), ""},
		{"empty", "", "1 to 255 bytes"},
		{"256 bytes", strings.Repeat("d", 256), "1 to 255 bytes"},
		{"a slash", "edge/ip", `"/"`},
		{"a slash alone", "/", `"/"`},
		{"dot", ".", "segment"},
		{"dot dot", "..", "segment"},
		{"a tab", "a\tb", "printable ASCII"},
		{"DEL", "a\x7fb", "printable ASCII"},
		{"not ASCII", "café", "printable ASCII"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := envoyconf.ValidateDomain(tc.domain)
			if tc.reason == "" {
				if err != nil {
					t.Errorf("ValidateDomain(%q): %v, want nil", tc.domain, err)
				}
				return
			}
			fe, ok := errors.AsType[*policy.FieldError](err)
			if !ok || fe.Field != "domain" || !strings.Contains(fe.Reason, tc.reason) || !errors.Is(err, policy.ErrInvalid) {
				t.Errorf("ValidateDomain(%q): %v, want a field error of domain saying %q", tc.domain, err, tc.reason)
			}
		})
	}
}

func TestDomainOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, domain string
		line              int
		reason            string // a part of the reason; "" when it reads
	}{
		{"first", "domain: edge\ndescriptors: []\n", "edge", 0, ""},
		{"after descriptors, quoted", "descriptors: []\ndomain: \"a b\"\n", "a b", 0, ""},
		{"a number", "domain: 42\n", "42", 0, ""},
		{"the rest not read", "domain: edge\ndescriptors: 3\nunknown: x\n", "edge", 0, ""},
		{"no domain", "descriptors: []\n", "", 1, "domain is required"},
		{"empty domain", "descriptors: []\ndomain:\n", "", 2, "must not be empty"},
		{"a list", "domain: [a]\n", "", 1, "text"},
		{"not YAML", "domain: a\n  b: [\n", "", 2, "not valid YAML"},
		{"empty", "", "", 0, "empty"},
		{"too large", "domain: a\n#" + strings.Repeat("x", envoyconf.MaxSource), "", 0, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := envoyconf.DomainOf([]byte(tc.src))
			if tc.reason == "" {
				if err != nil || d != tc.domain {
					t.Errorf("DomainOf: %q, %v, want %q", d, err, tc.domain)
				}
				return
			}
			e, ok := errors.AsType[*envoyconf.Error](err)
			if !ok || e.Line != tc.line || !strings.Contains(e.Reason, tc.reason) {
				t.Errorf("DomainOf: %v, want line %d saying %q", err, tc.line, tc.reason)
			}
		})
	}
}

func TestHoldingAdmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		h     envoyconf.Holding
		rules int
		want  error // nil, ErrTooManyDomains, or a *TooManyRulesError
	}{
		{"nothing held", envoyconf.Holding{}, 10, nil},
		{"the last domain", envoyconf.Holding{Domains: 99}, 10, nil},
		{"one domain too many", envoyconf.Holding{Domains: 100}, 0, envoyconf.ErrTooManyDomains},
		{"the last rules", envoyconf.Holding{Domains: 3, Rules: 990}, 10, nil},
		{"one rule too many", envoyconf.Holding{Domains: 3, Rules: 990}, 11, &envoyconf.TooManyRulesError{Rules: 11, Others: 990}},
		{"a file of 1,000 alone", envoyconf.Holding{}, 1000, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.h.Admit(tc.rules)
			switch want := tc.want.(type) {
			case nil:
				if err != nil {
					t.Errorf("Admit: %v, want nil", err)
				}
			case *envoyconf.TooManyRulesError:
				got, ok := errors.AsType[*envoyconf.TooManyRulesError](err)
				if !ok || *got != *want || !errors.Is(err, policy.ErrInvalid) {
					t.Errorf("Admit: %v, want %v", err, want)
				}
			default:
				if !errors.Is(err, want) {
					t.Errorf("Admit: %v, want %v", err, want)
				}
			}
		})
	}
}

// TestErrorIsAnInvalidConfiguration: every refusal of Parse is both an
// invalid configuration (the HTTP layer's 400 naming the line) and, as
// before, policy's invalid input.
func TestErrorIsAnInvalidConfiguration(t *testing.T) {
	t.Parallel()
	_, err := envoyconf.Parse("d", []byte("domain: d\ndescriptors: 3\n"))
	if !errors.Is(err, envoyconf.ErrInvalid) || !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("Parse: %v, want ErrInvalid and policy.ErrInvalid", err)
	}
}
