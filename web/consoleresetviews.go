package web

// The view models of the console's password reset (/console/reset) and
// its confirmation mail sent again.

// ConsoleResetView is the page that asks for the address to mail a reset
// link to, and, once asked (Sent), its answer, the same whether or not an
// account has the address.
type ConsoleResetView struct {
	Sent  bool
	Email string
	// Error says why the request was refused; RetryAfter, when set, when
	// to try again after a refusal by the limiter.
	Error, RetryAfter string
	CSRF              string
}

// ConsoleNewPasswordView is the mailed link's page: a new password for
// the member of Token.
type ConsoleNewPasswordView struct {
	Token string
	Error string
	CSRF  string
}
