package envoyconf

// Cached is how many tenants' Domains c holds: the memory that MaxTenants
// bounds, which no answer of the Catalog shows.
func (c *Catalog) Cached() int { return c.domains.Len() }

// CachedBytes is the size of the files the Domains c holds were parsed
// from, together: what MaxBytes bounds.
func (c *Catalog) CachedBytes() int { return c.domains.Weight() }
