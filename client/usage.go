package client

import (
	"context"
	"time"
)

// Usage is the tenant's plan and what it has used this period.
type Usage struct {
	TenantID string
	// Plan is the plan bought; EffectivePlan the one whose limits apply
	// (starter while billing is unpaid or canceled).
	Plan, EffectivePlan string
	BillingStatus       string
	// PeriodStart and PeriodEnd bound the calendar month counted.
	PeriodStart, PeriodEnd time.Time
	// ChecksUsed counts live checks this period; ChecksAllotment is the
	// plan's allotment, nil when unlimited.
	ChecksUsed      int64
	ChecksAllotment *int64
	// SandboxUsed counts test keys' checks in the rolling 30 days, out of
	// SandboxAllotment.
	SandboxUsed, SandboxAllotment int64
	// RefusalsByLayer counts this period's refusals by the layer that
	// refused ("ip", "quota", …, "policy" for the tenant's own policies).
	RefusalsByLayer map[string]int64
	// Alerts lists the alerts of the last 7 days, latest first: a
	// policy's alert_after reached by a subject.
	Alerts []Alert
}

// Alert says that one subject of a policy was refused at least AlertAfter
// times within 24 hours, or, past Tollgate's budget of alerts per day,
// counts the day's other subjects that were.
type Alert struct {
	Policy string `json:"policy"`
	// SubjectKey is the subject's digest (Tollgate never stores subjects),
	// or "*" for an aggregate of Subjects subjects.
	SubjectKey string `json:"subject_key"`
	Subjects   int64  `json:"subjects"`
	// Count is the refusals in the 24 hours up to LastAt; for an
	// aggregate, the sum of its subjects' counts.
	Count int64 `json:"count"`
	// UnwatchedRefusals, for an aggregate, is the day's refusals of
	// subjects past Tollgate's budget of subjects counted one by one per
	// day, counted without their subject.
	UnwatchedRefusals int64     `json:"unwatched_refusals"`
	AlertAfter        int64     `json:"alert_after"`
	FirstAt           time.Time `json:"first_at"`
	LastAt            time.Time `json:"last_at"`
	// Shadow marks a policy in shadow mode: nothing was refused.
	Shadow bool `json:"shadow"`
}

type usageOut struct {
	TenantID         string           `json:"tenant_id"`
	Plan             string           `json:"plan"`
	EffectivePlan    string           `json:"effective_plan"`
	BillingStatus    string           `json:"billing_status"`
	PeriodStart      time.Time        `json:"period_start"`
	PeriodEnd        time.Time        `json:"period_end"`
	ChecksUsed       int64            `json:"checks_used"`
	ChecksAllotment  *int64           `json:"checks_allotment"`
	SandboxUsed      int64            `json:"sandbox_used"`
	SandboxAllotment int64            `json:"sandbox_allotment"`
	RefusalsByLayer  map[string]int64 `json:"refusals_by_layer"`
	Alerts           []Alert          `json:"alerts"`
}

func (out *usageOut) readAnswer(b []byte) error {
	return readJSON(b, out, "tenant_id", "plan", "effective_plan", "period_start", "period_end", "checks_used")
}

// Usage returns the tenant's plan and usage. Usage is flushed by Tollgate
// about once a second, so a check shows up shortly after it is answered.
// Its errors are the caller's to handle (no FailMode).
func (c *Client) Usage(ctx context.Context) (Usage, error) {
	var o usageOut
	if err := c.do(ctx, "GET", "/v1/usage", nil, &o); err != nil {
		return Usage{}, err
	}
	return Usage(o), nil
}
