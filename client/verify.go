package client

import (
	"context"
	"errors"
	"net/url"
)

// policyOut is the part of Tollgate's answer to GET /v1/policies/{name}
// the client reads.
type policyOut struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
}

func (out *policyOut) readAnswer(b []byte) error {
	return readJSON(b, out, "name", "algorithm")
}

// policiesOut is the answer to GET /v1/policies, which Verify reads only
// to know it is Tollgate's.
type policiesOut struct{}

func (out *policiesOut) readAnswer(b []byte) error {
	return readJSON(b, out, "policies")
}

// Verify asks Tollgate whether it knows the client's API key and, for each
// name in policies, whether the key's tenant has that policy: one call per
// policy (GET /v1/policies/{name}), or one listing the policies when none
// is named. These calls read configuration only: they count against no
// policy and not against the tenant's monthly allotment.
//
// It returns nil, or the first error: an *APIError with Status 401 for a
// key Tollgate does not know (mistyped, revoked), 404 for a policy the
// tenant does not have; an error wrapping ErrUnavailable, or a
// *RateLimitedError, when Tollgate could not say. Call it when an app
// starts, so that a wrong key or policy name stops the start rather than
// failing every check; Middleware does.
func (c *Client) Verify(ctx context.Context, policies ...string) error {
	if len(policies) == 0 {
		return c.do(ctx, "GET", "/v1/policies", nil, &policiesOut{})
	}
	for _, name := range policies {
		if _, err := c.policy(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// policy reads the policy called name.
func (c *Client) policy(ctx context.Context, name string) (policyOut, error) {
	if name == "" {
		return policyOut{}, errors.New("GET /v1/policies/: empty policy name")
	}
	var p policyOut
	err := c.do(ctx, "GET", "/v1/policies/"+url.PathEscape(name), nil, &p)
	return p, err
}
