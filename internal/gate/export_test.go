package gate

// TakeAlone makes g's batches pass the per-IP L1 and take the ceilings'
// advance units check by check, as Admit does, rather than once for the
// batch: the reference the batch's way is held to.
func TakeAlone(g *Gate) { g.takeAlone = true }
