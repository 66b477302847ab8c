package redis

import (
	"context"
	"net"
)

// NewWithDialer is New with go-redis's dialing replaced by dial, so that a
// test can route one node through a faultnet proxy.
func NewWithDialer(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Store, error) {
	return newStore(cfg, dial)
}

// Resent counts the scripts the store sent again after a cluster refused
// them before running them.
func (s *Store) Resent() int64 { return s.resent.Load() }
