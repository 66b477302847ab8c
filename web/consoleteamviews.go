package web

// The view models of the console's team pages (/console/team and the
// invitation's /console/invite). Handlers in internal/consolesite fill
// them with display-ready strings.

// ConsoleTeamView is the team page: the tenant's members and, for an
// owner, the invitation form.
type ConsoleTeamView struct {
	Chrome  ConsoleChrome
	Members []ConsoleTeamMember
	// Owner shows the invitation form and the remove links (an owner's
	// page); a developer's lists the members only.
	Owner  bool
	Invite ConsoleInviteForm
	// Unconfirmed shows, instead of the invitation form, that the member
	// confirms their address first.
	Unconfirmed bool
	// InviteTTL is how long an invitation works, in words.
	InviteTTL string
}

// ConsoleTeamMember is one member of the tenant, as listed.
type ConsoleTeamMember struct {
	Email, Role string
	// Status is "invited" (no password set yet), "confirmed",
	// "unconfirmed" or "disabled".
	Status string
	// Since is when the member was added (invited or signed up).
	Since string
	// You marks the signed-in member.
	You bool
	// RemoveHref leads to the removal's confirmation page; "" shows no
	// link.
	RemoveHref string
}

// ConsoleInviteForm invites an email as a role: what was typed, and why
// it was refused (RetryAfter after a refusal by the limiter).
type ConsoleInviteForm struct {
	Email, Role       string
	Error, RetryAfter string
}

// ConsoleRemoveView asks before a member's removal: who, what it does,
// and the button that posts it.
type ConsoleRemoveView struct {
	Chrome             ConsoleChrome
	Email, Role, Since string
	Consequence        string
	Action, Button     string
}

// ConsoleAcceptView is an invitation's page: the password the invited
// member chooses, sent with the link's token.
type ConsoleAcceptView struct {
	Token, CSRF string
	// Email and Workspace are the invited address and the tenant's name,
	// shown before a password is chosen; empty on a refusal of the
	// network's attempts, which reads no token.
	Email, Workspace string
	Error            string
	RetryAfter       string
}
