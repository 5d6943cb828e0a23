package coordinator

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// goneStore is the real object store, with the leader's compaction forced
// into the moment a reader opens its victim: delete before it opens the
// object (the reader then finds nothing) or once it read its first bytes
// (it has what the server sent so far, then waits for chunks that never
// come).
type goneStore struct {
	jetstream.ObjectStore
	victim string
	before bool
	once   sync.Once
}

func (g *goneStore) Get(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	hit := false
	if name == g.victim {
		g.once.Do(func() { hit = true })
	}
	if hit && g.before {
		_ = g.ObjectStore.Delete(context.Background(), name)
	}
	r, err := g.ObjectStore.Get(ctx, name, opts...)
	if hit && !g.before && err == nil {
		return &deletingResult{ObjectResult: r, del: func() { _ = g.ObjectStore.Delete(context.Background(), name) }}, nil
	}
	return r, err
}

// deletingResult deletes its object once the reader has its first bytes.
type deletingResult struct {
	jetstream.ObjectResult
	del  func()
	once sync.Once
}

func (d *deletingResult) Read(p []byte) (int, error) {
	n, err := d.ObjectResult.Read(p)
	if n > 0 {
		d.once.Do(d.del)
	}
	return n, err
}

func TestSnapshotRead_AnObjectDeletedWhileItIsReadIsReportedGoneAndDoesNotHang(t *testing.T) {
	e := newEnv(t, 1, nil)
	js, err := jetstream.New(e.coordClient())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	obj, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "READ_TEST"})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("snapshot"), 20<<20/8) // 160 chunks: most still on the server when the reader opens it
	for _, before := range []bool{false, true} {
		if _, err := obj.PutBytes(ctx, "state-x", big); err != nil {
			t.Fatal(err)
		}
		s := &snapshotStore{obj: &goneStore{ObjectStore: obj, victim: "state-x", before: before}, readTimeout: time.Second}
		rctx, cancel := context.WithTimeout(ctx, time.Minute) // a reader that waited for the deadline would show here
		start := time.Now()
		_, err := s.read(rctx, "state-x")
		late := rctx.Err()
		cancel()
		if !errors.Is(err, errSnapshotGone) {
			t.Fatalf("deleted before the read %v: read gave %v after %v, want the snapshot reported gone", before, err, time.Since(start))
		}
		if late != nil {
			t.Fatalf("deleted before the read %v: the read ended only at the caller's deadline", before)
		}
	}
	// An object that stays reads whole.
	if _, err := obj.PutBytes(ctx, "state-y", big); err != nil {
		t.Fatal(err)
	}
	data, err := (&snapshotStore{obj: obj, readTimeout: time.Second}).read(ctx, "state-y")
	if err != nil || !bytes.Equal(data, big) {
		t.Fatalf("reading an object nobody deletes: %d bytes, %v", len(data), err)
	}
}

// A coordinator starting (a standby, or a restart) lists the snapshots and
// reads the newest; when the leader's compaction deletes it in between,
// the start lists again and restores what is there, instead of counting a
// deleted snapshot as damage and refusing to serve.
func TestSnapshotRead_AStartWhoseNewestSnapshotGoesMeanwhileRestoresTheNextOne(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy, s.SnapshotRounds = "gavel", 1 })
	want, _, seqs := snapshotsAfterRounds(t, e)
	e.close()

	e.scfg.snapStore = func(o jetstream.ObjectStore) jetstream.ObjectStore {
		return &goneStore{ObjectStore: o, victim: snapshotName(seqs[0]), before: true}
	}
	defer startsWithEveryJob(t, e, want, "a start whose newest snapshot was deleted meanwhile")()
}

// startsWithEveryJob starts the coordinator on e's stored state, which
// must serve without reporting a recovery and with every job of want at
// its round or later; what names the start in failures. It returns the
// coordinator's stop.
func startsWithEveryJob(t *testing.T, e *env, want *protocol.StatusReply, what string) func() {
	t.Helper()
	err, svc, stop := runDamaged(t, e, false)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if h := svc.Health(); h.Recovery != "" {
		t.Errorf("%s reports a recovery: %+v", what, h)
	}
	got := status(t, e.client(), e.subj)
	if len(got.Jobs) != len(want.Jobs) || got.Round < want.Round {
		t.Errorf("after %s: %d jobs at round %d, before %d jobs at round %d", what, len(got.Jobs), got.Round, len(want.Jobs), want.Round)
	}
	return stop
}
