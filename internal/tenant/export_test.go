package tenant

// MissesHeld is how many unknown key prefixes d remembers: the memory that
// MaxMisses bounds, which no answer of the Directory shows.
func (d *Directory) MissesHeld() int {
	return d.keys.Misses()
}
