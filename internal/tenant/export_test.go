package tenant

// MissesHeld is how many unknown key prefixes d remembers: the memory that
// MaxMisses bounds, which no answer of the Directory shows.
func (d *Directory) MissesHeld() int {
	d.keys.mu.Lock()
	defer d.keys.mu.Unlock()
	return len(d.keys.misses)
}
