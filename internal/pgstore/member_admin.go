package pgstore

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/internal/console"
	"github.com/tollgate/tollgate/internal/pgstore/sqlcgen"
)

// SetMemberDisabled disables the tenant's member (an operator's act from the
// dashboard), ending every session of it in the same transaction, or enables
// it again; ErrNotFound for a member of another tenant. A disabled member
// cannot sign in, and its sessions no longer open the console.
func (s *Members) SetMemberDisabled(ctx context.Context, tenantID, memberID string, disabled bool) (console.Member, error) {
	p, ok := memberParams(tenantID, memberID)
	if !ok {
		return console.Member{}, fmt.Errorf("disable member %s: %w", memberID, console.ErrNotFound)
	}
	var m console.Member
	err := s.inTx(ctx, func(q *sqlcgen.Queries) error {
		row, err := q.SetMemberDisabled(ctx, sqlcgen.SetMemberDisabledParams{Disabled: disabled, Now: ts(s.now()), ID: p.ID, TenantID: p.TenantID})
		if err != nil {
			return err
		}
		m = memberOf(row)
		if disabled {
			_, err = q.DeleteMemberSessions(ctx, sqlcgen.DeleteMemberSessionsParams{MemberID: p.ID, TenantID: p.TenantID})
		}
		return err
	})
	if err != nil {
		return console.Member{}, fmt.Errorf("disable member %s: %w", memberID, err)
	}
	return m, nil
}
