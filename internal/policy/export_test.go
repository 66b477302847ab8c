package policy

// Cached is how many tenants' places c holds: the memory that MaxTenants
// bounds, which no answer of the Catalog shows.
func (c *Catalog) Cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// CachedOverrides is how many overrides the Sets c holds have together.
func (c *Catalog) CachedOverrides() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overrides
}
