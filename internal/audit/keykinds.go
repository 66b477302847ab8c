package audit

// The kinds of a key's changes, written alike by the operators' dashboard
// and the tenants' console (the actor tells whose), so that one filter finds
// a key's changes by both.
const (
	KindKeyCreated = "key_created"
	KindKeyRevoked = "key_revoked"
	// KindKeyRolled is a key replaced by a new one of its name and kind
	// (the console's roll); its detail holds key_id (the new key),
	// old_key_id, name, test, grace and old_expires_at (RFC 3339).
	KindKeyRolled = "key_rolled"
)
