package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The one place where values cross between the domain's Go types and
// PostgreSQL's: ids are UUIDs, instants are timestamptz read back in UTC.

// uuidOf reads an id; anything that is not a UUID names nothing (the
// caller answers as for a row that does not exist).
func uuidOf(s string) (pgtype.UUID, bool) {
	var u pgtype.UUID
	if err := u.Scan(s); err != nil || !u.Valid {
		return u, false
	}
	return u, true
}

// uuidOrNull reads an id that ofTenants kept; anything that is not a UUID
// is NULL, which names no tenant.
func uuidOrNull(s string) pgtype.UUID {
	u, _ := uuidOf(s)
	return u
}

// ofTenants returns the items of xs whose tenant id (the string id points
// to) is a UUID, that id spelled as PostgreSQL spells it, so that the audit
// planners group each tenant's items under one id. An id that is not a
// UUID names no tenant: its items are dropped, as those of a tenant that
// does not exist are. xs is left as it was.
func ofTenants[T any](xs []T, id func(*T) *string) []T {
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		p := id(&x)
		u, ok := uuidOf(*p)
		if !ok {
			continue
		}
		*p = u.String()
		out = append(out, x)
	}
	return out
}

// ts is t as a timestamptz.
func ts(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: true}
}

// tsPtr is t as a timestamptz, NULL for nil.
func tsPtr(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return ts(*t)
}

// timeOf is a timestamptz in UTC; the zero time for NULL.
func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// timePtrOf is a timestamptz in UTC; nil for NULL.
func timePtrOf(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// timestamptzOf is t as a timestamptz; NULL for nil.
func timestamptzOf(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}

// deref is a nullable text; "" for NULL.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nonEmpty is s as a nullable text, NULL for "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
