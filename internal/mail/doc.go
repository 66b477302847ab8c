// Package mail sends Tollgate's outgoing email (sign-up confirmations,
// password resets, invitations): plain-text messages over SMTP (SMTP), or,
// when no SMTP server is configured, into an in-memory Mailbox that logs
// each message so that a developer can follow its links.
//
// Every Sender writes the same checked message: a To that net/mail refuses
// or a To or Subject holding CR or LF (header injection) is ErrInvalid and
// nothing is sent. mail imports only the standard library and
// github.com/google/uuid; nothing of Tollgate's.
package mail
