package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress reports long simulations on stderr: a live line on a terminal,
// one line per finished policy otherwise.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	total int
	last  time.Time
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, tty: isTerminal(w)}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (p *progress) update(name string, round, done int) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r\033[K%s: round %d, %d/%d jobs done", name, round, done, p.total)
}

func (p *progress) finished(name string, rounds int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "simulated %-12s %4d rounds in %v\n", name, rounds, took.Round(time.Millisecond))
}
