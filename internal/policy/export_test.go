package policy

// Cached is how many tenants' Sets c holds: the memory that MaxTenants
// bounds, which no answer of the Catalog shows.
func (c *Catalog) Cached() int { return c.sets.Len() }

// CachedOverrides is how many overrides the Sets c holds have together.
func (c *Catalog) CachedOverrides() int { return c.sets.Weight() }
