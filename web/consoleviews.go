package web

// The view models of the tenants' console (/console). Handlers in
// internal/consolesite fill them with display-ready strings.

// ConsoleAuthView is the sign-up and the sign-in page.
type ConsoleAuthView struct {
	// SignUp says which of the two forms: sign-up (email, password and
	// the workspace's name) or sign-in.
	SignUp bool
	Email  string
	Name   string
	// Error says why the last attempt failed; RetryAfter, when set, when
	// to try again after a refusal by the limiter. Notice is neutral.
	Error, RetryAfter, Notice string
	CSRF                      string
	// Next is where to go once signed in (a console path).
	Next string
}

// ConsoleChrome is what every signed-in console page shares.
type ConsoleChrome struct {
	Title       string
	Section     string
	MemberEmail string
	TenantName  string
	CSRF        string
	Flash       string
}

// ConsoleKey is one API key of the tenant, as listed.
type ConsoleKey struct {
	Name, Prefix, Kind, Created, LastUsed, Status string
}

// ConsoleHomeView is the console's home: the quick start, the tenant's
// keys, and where its account stands.
type ConsoleHomeView struct {
	Chrome ConsoleChrome
	Plan   string
	// Unconfirmed asks the member to confirm their address: live keys wait
	// for it. Resent says a new confirmation mail went out.
	Unconfirmed bool
	// NewKeys are keys shown once, just made (at sign-up, at confirmation):
	// their full values, for the snippets.
	NewKeys []ConsoleNewKey
	Keys    []ConsoleKey
	// BaseURL is where the API answers, for the snippets; Key the key the
	// snippets show (a new one's value, else a placeholder, which the page
	// tells the member to replace with their key of KeyKind, live or test).
	BaseURL, Key, KeyKind string
	// SandboxChecks is the test keys' allotment per 30 days, written out.
	SandboxChecks string
}

// ConsoleNewKey is a key's full value, shown once.
type ConsoleNewKey struct {
	Kind, Value string
}

// ConsoleMessageView is the confirmation page's answer for a link that
// no longer works, or the signed-out notice pages.
type ConsoleMessageView struct {
	Title, Message, Link, LinkLabel string
}

// ConsoleMailboxView is the development mailbox: the messages the console
// would have sent, newest first.
type ConsoleMailboxView struct {
	Messages []ConsoleMail
}

// ConsoleMail is one message of the development mailbox.
type ConsoleMail struct {
	ID, At, To, Subject, Text string
}

// ConsoleNav is the console's navigation, in order.
var ConsoleNav = []NavItem{
	{"home", "Quick start", "/console"},
	{"keys", "Keys", "/console/keys"},
	{"policies", "Policies", "/console/policies"},
	{"webhooks", "Webhooks", "/console/webhooks"},
	{"team", "Team", "/console/team"},
	{"usage", "Usage", "/console/usage"},
	{"billing", "Billing", "/console/billing"},
}

// ConsoleConfirmedView is the answer to a confirmation with no session of
// its member in the browser: the live key, shown once.
type ConsoleConfirmedView struct {
	Key string
}
