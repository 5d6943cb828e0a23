package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestPacedReader_ReadsEverythingNoFasterThanItsRate: 1 MiB at 8 MiB/s
// takes at least an eighth of a second (a loaded machine only makes it
// slower), and arrives whole; a context that ends cuts the wait short with
// its error; rate 0 is no pacing.
func TestPacedReader_ReadsEverythingNoFasterThanItsRate(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	start := time.Now()
	got, err := io.ReadAll(paced(context.Background(), bytes.NewReader(data), 8<<20))
	took := time.Since(start)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d of %d bytes: %v", len(got), len(data), err)
	}
	if took < 120*time.Millisecond {
		t.Errorf("1 MiB at 8 MiB/s took %v, want at least 125 ms", took)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = io.ReadAll(paced(ctx, bytes.NewReader(data), 1<<10)) // 1 KiB/s: 17 minutes
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("a paced read past its context's end: %v after %v", err, time.Since(start))
	}

	r := bytes.NewReader(data)
	if paced(context.Background(), r, 0) != io.Reader(r) {
		t.Error("rate 0 wrapped the reader")
	}
}

// TestPurgeBelow_RemovesTheRecordsBelowInSteps: purging a real stream of
// 10,000 records below record 9,001 in steps of 1,000 leaves exactly
// 9,001–10,000, as one purge does; a purge below the first record
// changes nothing.
func TestPurgeBelow_RemovesTheRecordsBelowInSteps(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.coordClient()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, step := range []uint64{1000, 0} {
		name := fmt.Sprintf("PURGE_%d", step)
		st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"purge." + name}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10_000 {
			if err := nc.Publish("purge."+name, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the stream holds 10,000 records", func() bool {
			info, err := st.Info(ctx)
			return err == nil && info.State.Msgs == 10_000
		})
		if err := purgeBelow(ctx, st, 9001, step, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := purgeBelow(ctx, st, 5000, step, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.FirstSeq != 9001 || info.State.LastSeq != 10_000 || info.State.Msgs != 1000 {
			t.Errorf("steps of %d: records %d–%d (%d), want 9001–10000 (1000)", step, info.State.FirstSeq, info.State.LastSeq, info.State.Msgs)
		}
	}
}

// stallingReader gives n bytes, then blocks until release is closed.
type stallingReader struct {
	n       int
	release chan struct{}
}

func (s *stallingReader) Read(p []byte) (int, error) {
	if s.n == 0 {
		<-s.release
		return 0, io.ErrUnexpectedEOF
	}
	k := min(len(p), s.n)
	for i := range k {
		p[i] = 'x'
	}
	s.n -= k
	return k, nil
}

// TestPacedSnapshot_AWriterThatDiesMidPutLeavesNoSnapshotAndLosesNothing:
// pacing stretches a snapshot's put over about a second at 10,000 jobs,
// so a coordinator killed meanwhile leaves part of one in the store. Its
// connection drops with 4 MiB of a newer snapshot's chunks stored and no
// object description (nothing can clean up after a killed process); the
// next start restores the last complete snapshot, reports no damage and
// has every job.
func TestPacedSnapshot_AWriterThatDiesMidPutLeavesNoSnapshotAndLosesNothing(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy, s.SnapshotRounds = "gavel", 1 })
	want, _, seqs := snapshotsAfterRounds(t, e)
	e.stopService()

	writer := e.coordClient()
	js, err := jetstream.New(writer)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.ObjectStore(context.Background(), snapshotBucket(e.subj.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	r := &stallingReader{n: 4 << 20, release: make(chan struct{})}
	putDone := make(chan error, 1)
	go func() {
		_, err := obj.Put(context.Background(), jetstream.ObjectMeta{Name: snapshotName(seqs[0] + 1000)}, paced(context.Background(), r, 32<<20))
		putDone <- err
	}()
	eventually(t, 10*time.Second, "the writer stored its first chunks", func() bool { return r.n == 0 })
	time.Sleep(100 * time.Millisecond) // the last chunks reach the server
	writer.Close()                     // the process dies: its connection drops
	close(r.release)
	if err := <-putDone; err == nil {
		t.Fatal("the put of a writer whose connection dropped succeeded")
	}
	e.close()

	defer startsWithEveryJob(t, e, want, "a start after a writer died mid-put")()
	seqsAfter, err := (&snapshotStore{obj: mustObjectStore(t, e)}).list(context.Background())
	if err != nil || slices.Contains(seqsAfter, seqs[0]+1000) {
		t.Errorf("snapshots after the start %v (%v): the half-written one is listed", seqsAfter, err)
	}
}

func mustObjectStore(t *testing.T, e *env) jetstream.ObjectStore {
	t.Helper()
	js, err := jetstream.New(e.coordClient())
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.ObjectStore(context.Background(), snapshotBucket(e.subj.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	return obj
}
