package gate

// TakeAlone makes g's batches pass the per-IP L1 and take the ceilings'
// advance units check by check, as Admit does, rather than once for the
// batch: the reference the batch's way is held to.
func TakeAlone(g *Gate) { g.takeAlone = true }

// NoRefills keeps g's batches from refilling the advances they ran low
// (batchRefills): their advances are then those of checks taking alone.
func NoRefills(g *Gate) { g.noRefills = true }

// Refills returns how many refills g's batches were granted.
func Refills(g *Gate) int64 { return g.refills.Load() }
