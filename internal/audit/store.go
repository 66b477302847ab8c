package audit

import (
	"context"
	"time"

	"github.com/tollgate/tollgate/internal/alert"
)

// Store keeps first refusals, refusal counts and alerts. Implementations
// are safe for concurrent use; the rows of tenants that do not exist are
// dropped without error. The budgets' arithmetic is this package's, as
// pure plans (PlanFirstRefusals, PlanNotes, PlanCounts, PlanAlerts) that a
// Store applies in its transactions; what only the stored rows of every
// instance can answer (which refusal is first in its window, which subject
// is watched or reaches its alert_after) is the Store's.
type Store interface {
	// RecordFirstRefusals applies b once per b.ID, all or nothing. Of the
	// refusals that no instance has recorded for their (tenant, key, window
	// end), those of each tenant and minute get an audit entry of kind
	// KindRefusal, in order of time, while the minute's b.Budget lasts
	// (over every flush of every instance); the rest, and b.Overflow, are
	// added to the minute's one KindRefusalFlood entry. It returns the
	// entries written one by one. Keys are distinct.
	RecordFirstRefusals(ctx context.Context, b FirstRefusalFlush) (int64, error)
	// CountRefusals adds counts, all or none, once per flushID (a UUID): a
	// call with the id of a flush applied before adds nothing and returns
	// nothing, so that a flush whose fate an error left unknown can be sent
	// again. A subject gets counts of its own on a UTC day when it has some
	// that day already or while its tenant has watched fewer than budget
	// subjects that day (over every call of every instance); the refusals
	// of the others, and counts whose Key is AggregateSubject, are added to
	// their policy's count of the hour under AggregateSubject. It returns
	// whether each subject (but AggregateSubject) is watched. Rows are
	// distinct.
	CountRefusals(ctx context.Context, flushID string, budget int, cs []RefusalCount) ([]Watch, error)
	// RaiseAlerts raises or updates the alert of each check whose count
	// reaches its AlertAfter, from the counts committed before it starts,
	// and returns how many it raised or updated. A subject without an
	// alert that day gets one while its tenant has raised fewer than budget
	// that UTC day (over every call of every instance); past it, the
	// subject is counted once in its policy's aggregate alert of the day.
	// The refusals of the day's unwatched subjects (see CountRefusals) are
	// shown in the aggregate alert of each policy checked, made when
	// absent. Subjects are distinct; a check whose Key is AggregateSubject
	// only names its policy and day.
	RaiseAlerts(ctx context.Context, budget int, cs []AlertCheck) (int64, error)
	// ListAlerts lists a tenant's alerts whose LastAt is at or after since,
	// latest first, at most limit of them.
	ListAlerts(ctx context.Context, tenantID string, since time.Time, limit int) ([]alert.Alert, error)
	// RecordNotes applies b once per b.ID, all or nothing: the notes of
	// each tenant, scope and minute are written, in order of time, while
	// the minute's b.Budget lasts (over every flush of every instance); the
	// rest, and b.Overflow, are added to the minute's one flood entry (kind
	// Kind+FloodSuffix). It returns the entries written one by one.
	RecordNotes(ctx context.Context, b NoteFlush) (int64, error)
	// PruneRefusals deletes the windows that ended before windowsBefore
	// and the audit budgets of minutes before it, the hourly counts of
	// hours before hoursBefore and the alert budgets of days before its
	// day, and the ids of flushes applied before flushesBefore.
	PruneRefusals(ctx context.Context, windowsBefore, hoursBefore, flushesBefore time.Time) error
	// PruneAlerts deletes the alerts whose LastAt is before before and
	// returns how many it deleted.
	PruneAlerts(ctx context.Context, before time.Time) (int64, error)
	// PruneAudit deletes the audit entries dated before before, of every
	// kind, and returns how many it deleted.
	PruneAudit(ctx context.Context, before time.Time) (int64, error)
}
