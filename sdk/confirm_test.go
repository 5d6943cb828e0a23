package sdk_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// wireCount counts what a client writes on its connections: PING (a flush
// round trip) and publications on one subject.
type wireCount struct {
	mu          sync.Mutex
	pings, pubs int
	subject     []byte
	tail        []byte // the end of the previous write: a command split between writes
}

func (w *wireCount) Dial(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, w: w}, nil
}

func (w *wireCount) saw(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := append(w.tail, p...)
	keep := min(len(buf), len(w.subject)+8)
	start := len(w.tail) // count only commands that end in this write
	for _, cmd := range []struct {
		pat []byte
		n   *int
	}{{[]byte("PING\r\n"), &w.pings}, {append([]byte("PUB "), w.subject...), &w.pubs}} {
		for i := 0; ; {
			k := bytes.Index(buf[i:], cmd.pat)
			if k < 0 {
				break
			}
			if i+k+len(cmd.pat) > start {
				*cmd.n++
			}
			i += k + len(cmd.pat)
		}
	}
	w.tail = append(w.tail[:0], buf[len(buf)-keep:]...)
}

func (w *wireCount) counts() (pings, pubs int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pings, w.pubs
}

type countedConn struct {
	net.Conn
	w *wireCount
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.w.saw(p)
	return c.Conn.Write(p)
}

// TestEvents_PublishedBatchesAreConfirmedByOneRoundTripEvery30SamplingIntervals:
// a job that samples every 20 ms publishes a batch each time (about 100 in
// 2 s) but asks the server for a flush round trip (the confirmation that
// lets it drop delivered events) only once its oldest unconfirmed batch is
// 30 sampling intervals (600 ms) old. Flush still confirms at once, and
// nothing stays buffered.
func TestEvents_PublishedBatchesAreConfirmedByOneRoundTripEvery30SamplingIntervals(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	w := &wireCount{subject: []byte(subj.Events("confirmed"))}
	job, err := sdk.Register(ctx, append(baseOptions(c, "confirmed"), sdk.WithEpochs(100_000),
		sdk.WithSampleInterval(20*time.Millisecond), sdk.WithNATSOptions(nats.SetCustomDialer(w)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	go func() {
		for _, err := range sdk.Steps(ctx, job, &epochSource{perEpoch: 100_000, work: 200 * time.Microsecond}) {
			if err != nil {
				return
			}
		}
	}()
	sdktest.Eventually(t, 10*time.Second, "the job trains", func() bool { return job.StepsDone() > 100 })
	p0, b0 := w.counts()
	time.Sleep(2 * time.Second)
	p1, b1 := w.counts()
	pings, pubs := p1-p0, b1-b0
	t.Logf("in 2 s: %d batches published, %d flush round trips", pubs, pings)
	if pubs < 40 {
		t.Fatalf("%d batches in 2 s at a 20 ms sampling interval", pubs)
	}
	if pings > 2000/600+3 { // one per 600 ms, a connection keepalive, a margin
		t.Errorf("%d round trips for %d batches in 2 s: want at most one every 600 ms", pings, pubs)
	}
	fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
	defer fcancel()
	if err := job.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	if n := job.Buffered(); n != 0 {
		t.Errorf("%d events still buffered after Flush", n)
	}
}
