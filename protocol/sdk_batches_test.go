package protocol_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// TestDecodeBatch_AgreesWithTheOldDecoderOnBatchesARealSDKSends runs a real
// coordinator and a real SDK job (progress, batch-size changes, epochs,
// done), captures every batch the job publishes, and requires the one-pass
// decoder and the old one to agree on each and on edits of each.
func TestDecodeBatch_AgreesWithTheOldDecoderOnBatchesARealSDKSends(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 2, Round: 100 * time.Millisecond})
	var mu sync.Mutex
	var batches [][]byte
	sub, err := c.Client().Subscribe(c.Subj.AllEvents(), func(m *nats.Msg) {
		mu.Lock()
		batches = append(batches, m.Data)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, sdk.WithURL(c.URL()), sdk.WithJobID("sdk-batches"), sdk.WithModel("ResNet-18"),
		sdk.WithBatchSize(32), sdk.WithDatasetSize(3200), sdk.WithEpochs(6), sdk.WithThroughput(250),
		sdk.WithSampleInterval(5*time.Millisecond), sdk.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	for epoch := range 6 {
		for step := range 100 {
			job.RecordSteps(1, time.Duration(3+step%5)*time.Millisecond+time.Duration(epoch)*17*time.Microsecond)
			if step%25 == 0 {
				time.Sleep(6 * time.Millisecond) // let the sampler publish
			}
		}
		job.EndEpoch()
		if epoch == 2 {
			if err := job.SetBatchSize(64); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := job.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Client().Flush(); err != nil {
		t.Fatal(err)
	}
	sdktest.Eventually(t, 5*time.Second, "the done event is captured", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) > 0 && bytes.Contains(batches[len(batches)-1], []byte(`"type":"done"`))
	})

	mu.Lock()
	defer mu.Unlock()
	kinds := map[protocol.EventType]int{}
	for _, data := range batches {
		b, err := protocol.DecodeBatch(data, 0)
		if err != nil {
			t.Fatalf("the SDK's batch %s is refused: %v", data, err)
		}
		for _, e := range b.Events {
			kinds[e.Type]++
		}
		if d := protocol.DiffBatchDecoders(data, 0); d != "" {
			t.Errorf("batch %s: %s", data, d)
		}
		// Edits of a real batch: truncations and a byte flipped at each position.
		for i := 0; i < len(data); i += 3 {
			for _, m := range [][]byte{data[:i], flip(data, i)} {
				if d := protocol.DiffBatchDecoders(m, 0); d != "" {
					t.Fatalf("edit %q: %s", m, d)
				}
			}
		}
	}
	if kinds[protocol.EventProgress] < 6 || kinds[protocol.EventBatchSize] != 1 || kinds[protocol.EventDone] != 1 {
		t.Errorf("captured %d batches with events %v; want progress, one batch_size and one done", len(batches), kinds)
	}
	t.Logf("%d SDK batches, events %v", len(batches), kinds)
}

// flip returns data with the byte at i changed (to a byte that changes
// its JSON meaning where possible).
func flip(data []byte, i int) []byte {
	m := append([]byte(nil), data...)
	switch m[i] {
	case '"':
		m[i] = '\''
	case ':':
		m[i] = ','
	default:
		m[i] ^= 0x20
	}
	return m
}
