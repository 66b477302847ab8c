package dashboard

import (
	"github.com/tollgate/tollgate/internal/tenant"
	"github.com/tollgate/tollgate/web"
)

func count(n int64) string { return web.Count(n) }

// statusClass colours a billing status: in good standing, retrying, or
// held to starter.
func statusClass(status string) string {
	switch status {
	case tenant.StatusActive, tenant.StatusTrialing, "":
		return "b-good"
	case tenant.StatusPastDue:
		return "b-warn"
	}
	return "b-bad"
}
