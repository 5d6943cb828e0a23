package protocol_test

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// sdkBatch is a batch of n progress events with the field values an SDK
// writes (json.Marshal of a protocol.Batch, as sdk/events.go publishes it).
func sdkBatch(n int) []byte {
	b := protocol.Batch{V: protocol.Version, Job: "job-004217", Events: make([]protocol.Event, n)}
	for i := range b.Events {
		b.Events[i] = protocol.Event{V: protocol.Version, Type: protocol.EventProgress, Job: b.Job,
			Seq: uint64(7310 + i), Steps: 41, Elapsed: 1.0038214 + float64(i)/1e4, StepsDone: 299_710 + 41*int64(i),
			TotalSteps: 1_172_000, Epoch: 76, BatchSize: 256, Throughput: 40.84563 + float64(i)/1e3}
	}
	data, err := json.Marshal(&b)
	if err != nil {
		panic(err)
	}
	return data
}

// BenchmarkDecodeBatch_SDK decodes batches as an SDK writes them: one event
// (a job at one batch a second with a round of several seconds sends one or
// two), 16 and 256 events (the SDK's largest batch, after an outage).
func BenchmarkDecodeBatch_SDK(b *testing.B) {
	benchmarkDecodeBatch(b, protocol.DecodeBatch)
}

// BenchmarkDecodeBatch_SDKOldDecoder is the same on the three-pass decoder
// DecodeBatch replaced (the differential tests' oracle), for a before and
// after under the same load.
func BenchmarkDecodeBatch_SDKOldDecoder(b *testing.B) {
	benchmarkDecodeBatch(b, protocol.OracleDecodeBatch)
}

func benchmarkDecodeBatch(b *testing.B, decode func([]byte, int) (*protocol.Batch, error)) {
	for _, n := range []int{1, 16, 256} {
		data := sdkBatch(n)
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if _, err := decode(data, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the process's user and system CPU time (its garbage
// collection included): per operation, steadier than the wall time on a
// shared machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
