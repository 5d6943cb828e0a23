package coordinator

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Storing a state snapshot is bulk work for the NATS server: at 10,000 jobs
// it writes tens of megabytes into the object store, reads them back, and
// purges tens of thousands of records from the log. Done at full speed it
// held both cores of a 2-core machine for 100–150 ms, and the jobs' event
// batches sent meanwhile waited: with node agents at 10,000 jobs, the
// rounds with a snapshot held most of the batches that took over 10 ms
// from the job to the state (docs/scale.md, session 13). So the writer
// paces itself: it feeds the snapshot to the store and reads it back at
// snapshotPace, and purges the log in steps of purgeStep records with
// purgePause between them. Snapshots are at least a round apart, and at
// this pace a 100 MB one is stored and verified in about 3 s.

// snapshotPace is the rate, in bytes a second, at which the snapshot
// writer puts a snapshot and reads it back. The store's 30 s bound
// (storeState) holds a paced put or read-back of up to about 1.9 GB; a
// 10,000-job snapshot is 20–23 MiB.
const snapshotPace = 64 << 20

// purgeStep and purgePause: the log is compacted purgeStep records at a
// time, with purgePause between the purges, so that no purge holds the
// log's appends for long. A purge costs the server about 0.6 ms plus
// 1–3 µs a record (the per-subject counts of every record removed), so
// 1,024 records hold the appends for about 1 ms on a quiet machine and a
// few under load; 4,096 held them 3–12 ms quiet, and with 10,000 resident
// jobs (10,000 records a second, 100,000–150,000 purged a snapshot) the
// purges' steps were among the busiest tenths of the late batches
// (docs/scale.md, session 16).
const (
	purgeStep  = 1024
	purgePause = 4 * time.Millisecond
)

// pacedReader reads from r no faster than rate bytes a second (on
// average since its first read), sleeping as needed; the sleep ends with
// ctx.
type pacedReader struct {
	ctx   context.Context
	r     io.Reader
	rate  float64
	start time.Time
	n     int64
}

// paced wraps r; rate <= 0 returns r itself.
func paced(ctx context.Context, r io.Reader, rate int64) io.Reader {
	if rate <= 0 {
		return r
	}
	return &pacedReader{ctx: ctx, r: r, rate: float64(rate)}
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	if wait := time.Until(due); wait > 0 && err == nil {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return n, p.ctx.Err()
		}
	}
	return n, err
}

// purgeBelow removes the log's records below seq, at most step records a
// purge with pause between purges (step <= 0: one purge).
func purgeBelow(ctx context.Context, stream jetstream.Stream, seq uint64, step uint64, pause time.Duration) error {
	if step > 0 {
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		for next := info.State.FirstSeq + step; next < seq; next += step {
			if err := stream.Purge(ctx, jetstream.WithPurgeSequence(next)); err != nil {
				return err
			}
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return stream.Purge(ctx, jetstream.WithPurgeSequence(seq))
}
