// Package syncbuf is a bytes.Buffer safe for concurrent writers, for tests
// that collect the logs or output of several goroutines or child processes.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes from any goroutine; its zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
