// Package logbuf is the log sink of Tollgate's tests: a buffer that a
// server (in process, or a child process's output) writes while the test
// reads it.
//
// Only tests import logbuf; it imports only the standard library.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer whose String is safe to call while it is written.
// The zero Buffer is empty and ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
