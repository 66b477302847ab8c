package postgres

import "time"

// enqueue adds c to the statement being gathered, or, when c has a Now of its
// own, sends it on its own. It returns the channel that is closed when c's
// wait is over.
func (s *Store) enqueue(c *call) (<-chan struct{}, error) {
	now := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	expired := s.expiry(now)
	if !c.req.Now.IsZero() {
		s.mu.Unlock()
		us := c.req.Now.UnixMicro()
		go s.send([]*call{c}, &us)
		return expired, nil
	}
	if len(s.pending) == 0 {
		s.firstAt = now
	}
	s.pending = append(s.pending, c)
	before := s.items
	s.items += len(c.req.Items)
	// The loop needs waking for a first call (it may send it at once) and for
	// a statement that just filled up; otherwise it is waiting for a timer or
	// a statement in flight, and will look then.
	wake := len(s.pending) == 1 || (before < s.maxItems && s.items >= s.maxItems)
	s.mu.Unlock()
	if wake {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return expired, nil
}

// expiry returns the channel that is closed once a Check that arrived at
// now has waited s.timeout, rounded up to a whole millisecond since the
// store opened: the Checks of one millisecond share one timer, where a
// context.WithTimeout each would cost every Check a timer and two
// allocations. Its caller holds s.mu.
func (s *Store) expiry(now time.Time) <-chan struct{} {
	ms := int64(now.Sub(s.opened) / time.Millisecond)
	if s.expired == nil || ms != s.expiredMs {
		ch := make(chan struct{})
		time.AfterFunc(s.opened.Add(time.Duration(ms+1)*time.Millisecond+s.timeout).Sub(now), func() { close(ch) })
		s.expired, s.expiredMs = ch, ms
	}
	return s.expired
}

// loop sends the gathered calls as statements: at once when no statement
// is in flight (waiting would only add latency), else when the window has
// passed since the oldest call or the statement is full; and never more
// than s.inflight statements at once, so that calls keep gathering while
// the database is busy instead of queueing for connections one by one. A
// statement decides its requests in the order they arrived.
func (s *Store) loop() {
	defer close(s.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	inflight := 0
	for {
		select {
		case <-s.kick:
		case <-timer.C:
		case <-s.freed:
			inflight--
		case <-s.quit:
			s.mu.Lock()
			s.closed = true
			rest := s.pending
			s.pending, s.items = nil, 0
			s.mu.Unlock()
			for _, c := range rest {
				c.err = errClosed
				c.done <- struct{}{}
			}
			for ; inflight > 0; inflight-- {
				<-s.freed
			}
			return
		}
		for inflight < s.inflight {
			calls, wait := s.take(inflight == 0)
			if calls == nil {
				if wait > 0 {
					timer.Reset(wait)
				}
				break
			}
			inflight++
			go func() {
				s.send(calls, nil)
				s.freed <- struct{}{}
			}()
		}
	}
}

// take removes a statement's calls from the pending ones if one is due, or
// returns how long until it is (zero when nothing is pending).
func (s *Store) take(idle bool) ([]*call, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil, 0
	}
	if !idle && s.items < s.maxItems {
		if wait := s.window - time.Since(s.firstAt); wait > 0 {
			return nil, wait
		}
	}
	n, items := 0, 0
	for n < len(s.pending) && (n == 0 || items+len(s.pending[n].req.Items) <= s.maxItems) {
		items += len(s.pending[n].req.Items)
		n++
	}
	calls := s.pending[:n:n]
	if n == len(s.pending) {
		s.pending = nil
	} else {
		// The rest arrived within the same window, so they are due as well.
		s.pending = s.pending[n:]
	}
	s.items -= items
	return calls, 0
}
