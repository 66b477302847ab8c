package webhooks

import "syscall"

// Guard is the connect-time check NewClient's dialer runs on every
// address it connects to, after DNS.
func Guard(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return guard(allowPrivate)
}
