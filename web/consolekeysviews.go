package web

// The view models of the console's keys page (/console/keys).

// ConsoleKeysView is the keys page: the tenant's keys, the form that
// makes one, a key just made (shown once), and the last key changes of
// the tenant's audit log.
type ConsoleKeysView struct {
	Chrome ConsoleChrome
	Keys   []ConsoleKeyRow
	Form   ConsoleKeyForm
	// NewKey, when not nil, is a key just made or rolled: its full value,
	// shown this once.
	NewKey *ConsoleNewKey
	// CanLive says the member may make live keys (their address is
	// confirmed).
	CanLive bool
	Audit   []ConsoleAuditRow
}

// ConsoleKeyRow is one key as the keys page lists it, display-ready.
type ConsoleKeyRow struct {
	ID, Name, Kind, Prefix, Created, Expires, LastUsed, Status string
	// Active keys may be revoked and rolled; revoked or expired ones not.
	Active bool
}

// ConsoleKeyForm is the form that makes a key, as typed, and why it was
// refused (Error).
type ConsoleKeyForm struct {
	Name, Kind, Expires string
	Expiries            []ConsoleChoice
	Error               string
}

// ConsoleChoice is one option of a choice: its form value and its label.
type ConsoleChoice struct {
	Value, Label string
}

// ConsoleAuditRow is one audit entry of a key change.
type ConsoleAuditRow struct {
	At, Actor, Kind, Key string
}

// ConsoleKeyConfirmView asks before revoking (Roll false) or rolling a
// key; a roll chooses its grace period among Graces (Grace the chosen).
type ConsoleKeyConfirmView struct {
	Chrome ConsoleChrome
	Roll   bool
	Key    ConsoleKeyRow
	Graces []ConsoleChoice
	Grace  string
	Error  string
}
