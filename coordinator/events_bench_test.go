package coordinator

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// BenchmarkEvents_IntoTheLog: a job's connection (the jobs' account)
// publishes one-event batches, as the SDK sends them, into the log of the
// embedded server, flushing every 256 and waiting every 8,192 until the
// log stored them (the stream drops what arrives while 100,000 messages
// wait to be stored: nats-server's ingest queue limit). It reports the
// process's CPU a batch (the server's work and the client's) besides the
// wall time and the allocations.
func BenchmarkEvents_IntoTheLog(b *testing.B) {
	emb, coord := embeddedConn(b, EmbeddedConfig{DataDir: b.TempDir(), DontListen: true, FloodLimit: -1}) // publishes flat out
	js, err := jetstream.New(coord)
	if err != nil {
		b.Fatal(err)
	}
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := ServiceConfig{MaxMessageBytes: 64 << 10}
	st, err := openStorage(ctx, js, subj, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	job, err := nats.Connect("", nats.InProcessServer(emb.Server))
	if err != nil {
		b.Fatal(err)
	}
	defer job.Close()
	ev := progress(1, 40, 40, 4)
	ev.V, ev.Job = protocol.Version, "job-00001"
	data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: "job-00001", Events: []protocol.Event{ev}})
	on := subj.Events("job-00001")
	stored := func() uint64 {
		info, err := st.stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return info.State.Msgs
	}
	base := stored()
	cpu := cpuTime(b)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := job.Publish(on, data); err != nil {
			b.Fatal(err)
		}
		if n++; n%256 == 0 {
			if err := job.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		if n%8192 == 0 {
			eventually(b, time.Minute, "the log stored the batches", func() bool { return stored() >= base+uint64(n) })
		}
	}
	if err := job.Flush(); err != nil {
		b.Fatal(err)
	}
	eventually(b, time.Minute, "the log stored every batch", func() bool { return stored() >= base+uint64(n) })
	b.ReportMetric(float64((cpuTime(b)-cpu).Nanoseconds())/float64(n), "cpu-ns/op")
}
