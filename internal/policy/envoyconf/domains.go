package envoyconf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/tollgate/tollgate/internal/policy"
)

// Bounds on what one tenant stores, so that the Domains every instance keeps
// of a tenant stay small whatever it uploads.
const (
	// MaxDomains is the number of domains one tenant may hold.
	MaxDomains = 100
	// MaxTenantRules is the number of rate_limit blocks (unlimited ones
	// included) a tenant's domains may hold together: as many as its
	// policies.
	MaxTenantRules = policy.MaxPolicies
	// MaxDomainLen is the length in bytes of a domain's name.
	MaxDomainLen = 255
)

// ErrInvalid is a file Parse refuses; every *Error wraps it, beside
// policy.ErrInvalid, so that the HTTP layer can answer it as an invalid
// configuration rather than an invalid request.
var ErrInvalid = errors.New("invalid configuration")

// ErrTooManyDomains is a put of a new domain beyond MaxDomains.
var ErrTooManyDomains = &policy.FieldError{
	Reason: fmt.Sprintf("a tenant may hold at most %d domains: delete one first", MaxDomains)}

// TooManyRulesError is a put that would take a tenant's domains past
// MaxTenantRules together. It unwraps to policy.ErrInvalid.
type TooManyRulesError struct {
	// Rules are the file's, Others those of the tenant's other domains.
	Rules, Others int
}

func (e *TooManyRulesError) Error() string {
	return fmt.Sprintf("a tenant's domains may hold at most %d rate_limit rules together: this file has %d and the other domains %d",
		MaxTenantRules, e.Rules, e.Others)
}

// Unwrap returns policy.ErrInvalid.
func (e *TooManyRulesError) Unwrap() error { return policy.ErrInvalid }

// ClientFault returns no field and the error's text, numbers included.
func (e *TooManyRulesError) ClientFault() (field, reason string) { return "", e.Error() }

// NotFoundError names the domain that does not exist, in words safe to show
// to the client that asked for it. It unwraps to policy.ErrNotFound.
type NotFoundError struct{ Domain string }

func (e *NotFoundError) Error() string { return fmt.Sprintf("domain %q not found", e.Domain) }

// Unwrap returns policy.ErrNotFound.
func (e *NotFoundError) Unwrap() error { return policy.ErrNotFound }

// ClientFault returns no field and the error's text.
func (e *NotFoundError) ClientFault() (field, reason string) { return "", e.Error() }

// ValidateDomain returns a *policy.FieldError of field "domain" unless d is
// a name a tenant may store a file under: 1 to MaxDomainLen bytes of
// printable ASCII (space to "~"), without "/", and neither "." nor "..".
//
// Envoy takes any non-empty string as a domain. Tollgate's is also a
// segment of the path /v1/envoy/domains/{domain}, which must reach it
// intact through the proxies in front: "/" could only travel as %2F, which
// many proxies decode (nginx, Envoy's own path normalization) or refuse,
// and "." and ".." are dot segments that clients and proxies remove
// (RFC 3986 §5.2.4), even escaped. Outside ASCII, names that look alike
// and differ (Unicode normalization) are refused rather than told apart.
// Every other byte travels escaped as it is.
func ValidateDomain(d string) error {
	bad := func(reason string) error { return &policy.FieldError{Field: "domain", Reason: reason} }
	if d == "" || len(d) > MaxDomainLen {
		return bad(fmt.Sprintf("must be 1 to %d bytes", MaxDomainLen))
	}
	if d == "." || d == ".." {
		return bad(`cannot be "." or "..": proxies and clients remove such a segment from the path`)
	}
	for i := 0; i < len(d); i++ {
		switch c := d[i]; {
		case c == '/':
			return bad(`cannot hold "/": it would not reach Tollgate as one segment of the path`)
		case c < ' ' || c > '~':
			return bad("must be printable ASCII (space to ~)")
		}
	}
	return nil
}

// DomainOf returns the domain a file names, for a caller that uploads the
// file under it (the command line). The rest of the file is not read: Parse
// does that. Every error is an *Error.
func DomainOf(src []byte) (string, error) {
	if len(src) > MaxSource {
		return "", &Error{Reason: fmt.Sprintf("the file must be at most %d bytes", MaxSource)}
	}
	doc, err := decode(src)
	if err != nil {
		return "", err
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return "", errAt(root, "the file must be a mapping with domain and descriptors")
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Kind == yaml.ScalarNode && k.Value == "domain" {
			d, err := text(root.Content[i+1], "domain")
			if err == nil && d == "" {
				err = errAt(root.Content[i+1], "domain must not be empty")
			}
			return d, err
		}
	}
	return "", errAt(root, "domain is required")
}

// checkStorable refuses a file that is not UTF-8 text: YAML may be UTF-16
// (Parse reads it), but a stored file is text, answered as uploaded.
func checkStorable(src []byte) error {
	if !utf8.Valid(src) || bytes.IndexByte(src, 0) >= 0 {
		return &Error{Reason: "the file must be UTF-8 text"}
	}
	return nil
}

// Domain is one of a tenant's uploaded files, as stored.
type Domain struct {
	// Name is the domain, which the file's domain repeats.
	Name string
	// Source is the file as uploaded, byte for byte; empty in a list.
	Source []byte
	// Rules is the number of the file's rate_limit blocks, unlimited ones
	// included: what counts against MaxTenantRules.
	Rules int
	// Version names this content of the domain: a new one at every put,
	// never one another put had, whatever the tenant or domain.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// MarshalJSON writes d as the API answers it: {"domain", "rules",
// "created_at", "updated_at"}, never the source.
func (d Domain) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Domain    string    `json:"domain"`
		Rules     int       `json:"rules"`
		CreatedAt time.Time `json:"created_at"`
		UpdatedAt time.Time `json:"updated_at"`
	}{d.Name, d.Rules, d.CreatedAt.UTC(), d.UpdatedAt.UTC()})
}

// Holding is what a tenant's domains other than the one being put hold, as
// the Store counts them under its lock.
type Holding struct {
	Domains, Rules int
}

// Admit returns nil when a file of rules rules may be put beside h (as a
// new domain or in place of one h leaves out), else ErrTooManyDomains or a
// *TooManyRulesError.
func (h Holding) Admit(rules int) error {
	if h.Domains >= MaxDomains {
		return ErrTooManyDomains
	}
	if h.Rules+rules > MaxTenantRules {
		return &TooManyRulesError{Rules: rules, Others: h.Rules}
	}
	return nil
}

// Store keeps tenants' domains; pgstore implements it. Every method is safe
// for concurrent use. A domain that does not exist is a *NotFoundError; a
// tenant that does not exist wraps policy.ErrNotFound too. A store that
// cannot be reached wraps policy.ErrUnavailable.
type Store interface {
	// PutDomain creates or replaces the domain d.Name of a tenant with
	// d.Source and d.Rules, and returns it as stored (without its source),
	// with CreatedAt kept from the domain it replaces. It admits the put
	// (Holding.Admit) in the transaction that writes, so that concurrent
	// puts cannot pass the bounds together.
	PutDomain(ctx context.Context, tenantID string, d Domain) (Domain, error)
	// GetDomain returns one domain with its source.
	GetDomain(ctx context.Context, tenantID, domain string) (Domain, error)
	// ListDomains returns a tenant's domains without their sources, sorted
	// by name.
	ListDomains(ctx context.Context, tenantID string) ([]Domain, error)
	DeleteDomain(ctx context.Context, tenantID, domain string) error

	Loader
}

// Loader loads all of a tenant's domains; the Catalog calls it.
type Loader interface {
	// LoadDomains returns a tenant's domains as of one moment, each with
	// its source but those whose Version is in held (the caller has them
	// already: a reload after one file changed fetches that file alone). A
	// tenant without domains has none.
	LoadDomains(ctx context.Context, tenantID string, held []int64) ([]Domain, error)
}
