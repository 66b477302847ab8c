package dashboard

import "github.com/tollgate/tollgate/internal/usageview"

// The usage views the dashboard shares with the tenants' console
// (package usageview): one builder each, not copies.
var (
	when            = usageview.When
	whenPtr         = usageview.WhenPtr
	share           = usageview.Share
	usageBar        = usageview.UsageBar
	minuteSeries    = usageview.MinuteSeries
	outcomeTotals   = usageview.OutcomeTotals
	clockTicks      = usageview.ClockTicks
	refusalBars     = usageview.RefusalBars
	chartSummary    = usageview.ChartSummary
	degradedBands   = usageview.DegradedBands
	degradedPeriods = usageview.DegradedPeriods
	alertRows       = usageview.AlertRows
	monthChart      = usageview.MonthChart
	budgetView      = usageview.BudgetView
)
