// Package alert says what an alert is: one subject of a tenant's policy
// refused at least alert_after times within 24 hours. audit raises alerts
// and keeps them; usage reports them and the dashboard shows them. The type
// lives here, below both, so that a reader of alerts needs nothing of the
// machinery that raises them: usage does not import audit.
//
// alert imports the standard library only.
package alert

import "time"

// AggregateSubject is the SubjectKey of an aggregate alert: the subjects
// that reached a policy's alert_after in a day once their tenant's alert
// budget of the day was spent, and the refusals of subjects past the day's
// watch budget.
const AggregateSubject = "*"

// Alert says that one subject of a policy was refused at least AlertAfter
// times within 24 hours. There is one alert per tenant, policy, subject and
// UTC day, up to the tenant's alert budget of the day; past it, one
// aggregate alert per policy and day (SubjectKey AggregateSubject) counts
// the other subjects, and the refusals of subjects past the day's watch
// budget, which raise no alert of their own.
type Alert struct {
	Policy string `json:"policy"`
	// SubjectKey is the subject's counter key, an HMAC digest: the raw
	// subject is never stored. It is AggregateSubject for an aggregate.
	SubjectKey string `json:"subject_key"`
	// Subjects is 1, or for an aggregate the number of subjects past the
	// alert budget it counts (maybe none).
	Subjects int64 `json:"subjects"`
	// Count is the refusals in the 24 hours up to LastAt; for an aggregate,
	// the sum of its subjects' counts when each was counted.
	Count int64 `json:"count"`
	// Unwatched, for an aggregate, is the refusals that day of subjects past
	// the tenant's watch budget of the day, counted without their subject.
	Unwatched  int64 `json:"unwatched_refusals"`
	AlertAfter int64 `json:"alert_after"`
	// FirstAt is when the threshold was reached that day; LastAt is the
	// latest refusal counted.
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
	// Shadow says the policy was in shadow mode: nothing was refused, this
	// is what it would have done.
	Shadow bool `json:"shadow"`
}
