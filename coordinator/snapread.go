package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Reading a snapshot races with the leader's compaction, which deletes all
// but the newest keepSnapshots snapshots after each one it stores: a
// standby starting, or catching up after it fell behind the compaction,
// may be reading the object that goes. The object store's reader then has
// what the server had sent (2 MiB of a 20 MiB object, measured) and waits
// for chunks that never come until its deadline; a read that found the
// object already deleted fails at once. Either way a snapshot that is gone
// must not count as a damaged one (an integrity problem that makes a start
// refuse to serve, or a standby give up): read says errSnapshotGone, and
// the caller lists the store again (restoreNewest, continueFromSnapshot).

// snapshotReadTimeout bounds one snapshot read (the 10,000-job snapshot
// reads in well under a second from a local server).
const snapshotReadTimeout = 30 * time.Second

// errSnapshotGone: the snapshot was deleted while it was read (the
// leader compacted); a newer one exists.
var errSnapshotGone = errors.New("the snapshot was deleted while it was read (the leader stored a newer one)")

// read returns the bytes of the object name.
func (s *snapshotStore) read(ctx context.Context, name string) ([]byte, error) {
	timeout := s.readTimeout
	if timeout == 0 {
		timeout = snapshotReadTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, err := readObject(rctx, s.obj, name)
	if err == nil || ctx.Err() != nil {
		return data, err
	}
	if _, ierr := s.obj.GetInfo(ctx, name); errors.Is(ierr, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%s: %w", name, errSnapshotGone)
	}
	return nil, err
}

func readObject(ctx context.Context, obj jetstream.ObjectStore, name string) ([]byte, error) {
	r, err := obj.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
