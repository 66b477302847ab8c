package tenant

import (
	"context"
	"fmt"
	"strings"
)

// The names of the keys a new tenant starts with.
const (
	FirstLiveKeyName = "first live key"
	FirstTestKeyName = "first test key"
)

// Creator stores a new tenant with its keys, all or nothing (Store does).
type Creator interface {
	CreateTenant(ctx context.Context, name, plan string, keys ...Key) (Tenant, error)
}

// Created is a tenant just made with its first keys. Live and Test are the
// keys themselves, to be shown once: Tollgate keeps only their hashes.
type Created struct {
	Tenant           Tenant
	LiveKey, TestKey Key
	Live, Test       string
}

// Create makes a tenant named name on plan, with a live and a test key
// named FirstLiveKeyName and FirstTestKeyName, in one call of s. It is how
// `tollgate tenants create` and the dashboard make tenants. Errors wrap
// ErrInvalid (a *FieldError) for a name ValidateName refuses and, from s,
// for an unknown plan (ValidatePlan says which there are); anything else
// is the store failing, or the system's random source.
func Create(ctx context.Context, s Creator, name, plan string) (Created, error) {
	return create(ctx, s, name, plan, true)
}

// CreateSandbox makes a tenant as Create does but with its test key only:
// Live and LiveKey are zero. The console's sign-up makes tenants so, and
// gives the live key once the owner has confirmed the address.
func CreateSandbox(ctx context.Context, s Creator, name, plan string) (Created, error) {
	return create(ctx, s, name, plan, false)
}

// create is Create, with a live key when live is set.
func create(ctx context.Context, s Creator, name, plan string, live bool) (Created, error) {
	if err := ValidateName(name); err != nil {
		return Created{}, err
	}
	var c Created
	var err error
	if c.Test, c.TestKey, err = NewKey(true); err != nil {
		return Created{}, err
	}
	c.TestKey.Name = FirstTestKeyName
	keys := []Key{c.TestKey}
	if live {
		if c.Live, c.LiveKey, err = NewKey(false); err != nil {
			return Created{}, err
		}
		c.LiveKey.Name = FirstLiveKeyName
		keys = []Key{c.LiveKey, c.TestKey}
	}
	if c.Tenant, err = s.CreateTenant(ctx, name, plan, keys...); err != nil {
		return Created{}, err
	}
	c.TestKey.TenantID = c.Tenant.ID
	if live {
		c.LiveKey.TenantID = c.Tenant.ID
	}
	return c, nil
}

// ValidatePlan returns a *FieldError (field plan) naming the plans there
// are unless name is one of plans.
func ValidatePlan(plans []Plan, name string) error {
	names := make([]string, len(plans))
	for i, p := range plans {
		if p.Name == name {
			return nil
		}
		names[i] = p.Name
	}
	return &FieldError{"plan", fmt.Sprintf("%q: no such plan; want one of %s", name, strings.Join(names, ", "))}
}
