package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// benchBatches measures one batch from Flush to its confirmation: a step
// recorded, then Flush (the progress event sent in a batch, then a
// confirmation round trip).
func benchBatches(b *testing.B, j *sdk.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		j.RecordSteps(1, time.Millisecond)
		if err := j.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUplink_BatchThroughTheAgent: the batch written into the uplink,
// published by the (test) agent on its connection; the confirmation is a
// flush line the agent answers after its connection flushed.
func BenchmarkUplink_BatchThroughTheAgent(b *testing.B) {
	c := sdktest.Start(b, sdktest.Config{Round: time.Hour})
	w := rawLeasePipe(b)
	defer w.Close()
	conn, _ := rawUplink(b, 0)
	newTestAgent(b, c, conn)
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "bench-uplink"), sdk.WithEpochs(10),
		sdk.WithSampleInterval(time.Hour))...)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	if !j.Uplinked() {
		b.Fatal("the uplink was not taken")
	}
	benchBatches(b, j)
}

// BenchmarkUplink_BatchOverNATS: the same batch published on the job's own
// connection, confirmed by a flush round trip with the server.
func BenchmarkUplink_BatchOverNATS(b *testing.B) {
	c := sdktest.Start(b, sdktest.Config{Round: time.Hour})
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "bench-nats-batch"), sdk.WithEpochs(10),
		sdk.WithSampleInterval(time.Hour))...)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	benchBatches(b, j)
}
