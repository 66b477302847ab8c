package web

// The view models of the console's usage page (/console/usage): the
// dashboard's usage views (charts, usage bar, alerts, budgets, degraded
// periods), for the member's own tenant.

// ConsoleUsageView is the usage page.
type ConsoleUsageView struct {
	Chrome ConsoleChrome
	// Plan is the plan the month counts against; Month its live checks
	// against the plan's allotment.
	Plan  string
	Month UsageBar
	// Minutes are the checks per minute and outcome over 24 hours, Days
	// per day and outcome over 30 days; MonthDays the month's live checks by day, cumulative, against the
	// allotment; Refusals the month's refusals by layer.
	Minutes, Days, MonthDays Chart
	Refusals                 HBars
	// PolicyUsage is the checks and refusals per policy.
	PolicyUsage PolicyUsage
	Alerts      []AlertRow
	Budgets     []ConsoleBudgetRow
	Degraded    []DegradedPeriod
}

// ConsoleBudgetRow is one budget policy and where it stands.
type ConsoleBudgetRow struct {
	Policy string
	Budget BudgetView
}
