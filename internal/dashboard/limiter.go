package dashboard

import "github.com/tollgate/tollgate/internal/signin"

// The sign-in limits of the dashboard's realm ("admin"): package signin's,
// which the tenants' console shares.
const (
	SignInsPerIP                 = signin.SignInsPerIP
	FailuresPerAccount           = signin.FailuresPerAccount
	FailuresPerAccountEverywhere = signin.FailuresPerAccountEverywhere
)

// realm keeps the dashboard's sign-in counters and form tokens apart from
// the console's.
const realm = "admin"
