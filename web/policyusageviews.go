package web

// PolicyUsage is a tenant's checks and refusals per policy (PolicyUsageCharts),
// as the dashboard's tenant page and the console's usage page show them.
type PolicyUsage struct {
	// ID is the data-testid of the whole and the prefix of its charts' ids.
	ID string
	// Empty, when not blank, is shown instead: no policy was checked.
	Empty string
	// Rows are the policies checked in the last 30 days, most checked
	// first.
	Rows []PolicyUsageRow
	// Charts are the hourly and daily charts of the most checked of them;
	// Note says how many are drawn, when not all are.
	Charts []PolicyCharts
	Note   string
}

// PolicyUsageRow is one policy's totals, formatted.
type PolicyUsageRow struct {
	Policy                                  string
	Checks24h, Refusals24h, RefusalShare24h string
	Checks30d, Refusals30d                  string
}

// PolicyCharts is one policy's checks and refusals per hour over 24 hours
// and per day over 30 days.
type PolicyCharts struct {
	Policy      string
	Hours, Days Chart
}
