package coordinator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// lockFile is the file under the data directory that an embedded coordinator
// holds an exclusive lock (flock) on while it runs. The kernel releases the
// lock when the process dies, kill -9 included, so a stale lock never blocks
// a restart.
const lockFile = "coordinator.lock"

// dirLock is a held data-directory lock.
type dirLock struct{ f *os.File }

// held keeps every held lock's file reachable: an *os.File that is garbage
// collected closes its descriptor, which would drop the lock while the
// server still runs (an Embedded value the caller no longer references).
var held sync.Map // *dirLock → struct{}

// lockDataDir takes the data directory's lock, or fails at once with an
// error naming the process that holds it.
func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("coordinator: data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("coordinator: data directory lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if raw, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(raw))); perr == nil {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("coordinator: data directory %s is in use by another coordinator (%s holds %s); "+
				"run one coordinator per data directory, or a standby on --nats-url", dir, holder, lockFile)
		}
		return nil, fmt.Errorf("coordinator: data directory lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	l := &dirLock{f: f}
	held.Store(l, struct{}{})
	return l, nil
}

// release drops the lock.
func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
	held.Delete(l)
}
