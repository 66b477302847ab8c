// Package audit keeps Tollgate's audit log: who changed what (plan changes,
// key revocations, overrides: any component records through Log), and the
// first refusal of each counter key in each window, which its Recorder, a
// admission.Observer, writes a flush at a time off the request path so that
// a flood of refusals writes one entry per key and window, whatever the
// number of instances. The Recorder also counts refusals of policies that set
// alert_after and raises an alert when one subject is refused that many
// times within 24 hours.
//
// One tenant can never flood the log or crowd out another: each tenant has
// an audit budget per UTC minute, and an alert budget and a watch budget
// (the subjects whose refusals are counted one by one) per UTC day, shared
// by every instance, past which one aggregate entry (KindRefusalFlood) or
// alert (alert.AggregateSubject) counts the rest; each tenant has its own share
// of the Recorder's queue; and entries older than the retention are pruned.
// The budgets' arithmetic lives here, as pure plans (minutes.go, days.go):
// given a flush and the rows a Store read under lock, they return the rows
// to write, and the Store holds the transaction and the SQL.
//
// audit imports admission (the Event it observes) and alert (what its
// alerts say), and no driver: pgstore implements its Store and LogStore.
package audit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is an entry or filter the log refuses: no actor or kind, a
// detail that is not JSON, an unknown tenant.
var ErrInvalid = errors.New("invalid audit entry")

// Actor and kinds written by this package.
const (
	// ActorTollgate is the actor of entries the service writes by itself.
	ActorTollgate = "tollgate"
	// KindRefusal is the first refusal of a counter key in a window. Its
	// detail holds layer, scope, policy, limit, key (the counter key, a
	// digest), window_end (RFC 3339), degraded and shadow.
	KindRefusal = "refusal"
	// KindRefusalFlood stands for the first refusals of one tenant in one
	// UTC minute past the Recorder's audit budget, which get no entry of
	// their own. Its detail holds window_start and window_end (RFC 3339,
	// the minute), refusals (their exact number, which grows while the
	// minute's refusals are flushed) and budget (the entries of that minute
	// written one by one).
	KindRefusalFlood = "refusal_flood"
)

// Limits of Filter.Limit.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// Entry is one audit log entry.
type Entry struct {
	// ID orders entries: a later entry has a higher ID. Set by the log.
	ID int64
	// At is when it happened; zero when recording means now.
	At time.Time
	// TenantID is the tenant concerned; empty for service-wide entries.
	TenantID string
	// Actor says who did it: an admin's name, "stripe", ActorTollgate.
	Actor string
	// Kind names what happened, such as "plan_changed" or KindRefusal.
	Kind string
	// Detail is stored as a JSON object. Read back, numbers are json.Number.
	Detail map[string]any
}

// Filter selects entries for List.
type Filter struct {
	// TenantID keeps one tenant's entries; empty keeps all.
	TenantID string
	// Kind keeps one kind; empty keeps all.
	Kind string
	// Kinds keeps the entries of any of these kinds (and Kind); empty keeps
	// all.
	Kinds []string
	// NotKinds drops the entries of these kinds.
	NotKinds []string
	// Limit bounds the entries returned: zero means DefaultListLimit, and
	// more than MaxListLimit means MaxListLimit.
	Limit int
	// Before, when positive, keeps entries whose ID is below it: pass the
	// last ID of a page to get the next one.
	Before int64
}

// LogStore keeps entries. Implementations are safe for concurrent use.
type LogStore interface {
	// InsertAudit stores e and returns it with its ID and At. An unknown
	// tenant is ErrInvalid.
	InsertAudit(ctx context.Context, e Entry) (Entry, error)
	// ListAudit returns the entries f selects, newest (highest ID) first;
	// f.Limit is already within bounds.
	ListAudit(ctx context.Context, f Filter) ([]Entry, error)
}

// Log records and lists audit entries. It is safe for concurrent use.
type Log struct {
	store LogStore
}

// NewLog returns the audit log kept in store.
func NewLog(store LogStore) *Log {
	return &Log{store: store}
}

// Record writes e now, on the caller's goroutine. It returns ErrInvalid
// when e has no Actor or Kind, a Detail that cannot be JSON, or an unknown
// tenant.
func (l *Log) Record(ctx context.Context, e Entry) error {
	if e.Actor == "" || e.Kind == "" {
		return fmt.Errorf("record audit entry: actor and kind are required: %w", ErrInvalid)
	}
	if _, err := l.store.InsertAudit(ctx, e); err != nil {
		return fmt.Errorf("record audit entry %s: %w", e.Kind, err)
	}
	return nil
}

// List returns the entries f selects, newest first.
func (l *Log) List(ctx context.Context, f Filter) ([]Entry, error) {
	switch {
	case f.Limit <= 0:
		f.Limit = DefaultListLimit
	case f.Limit > MaxListLimit:
		f.Limit = MaxListLimit
	}
	es, err := l.store.ListAudit(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list audit entries: %w", err)
	}
	return es, nil
}
