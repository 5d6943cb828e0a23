package sdk_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// benchRenewals measures one lease renewal from its sending to the job
// having applied it: send writes the RUN lease of round i.
func benchRenewals(b *testing.B, j *sdk.Job, send func(l protocol.Lease)) {
	now := nowSeconds()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		ch := j.Changed()
		send(protocol.Lease{V: protocol.Version, Job: j.ID(), Round: i, Action: protocol.Run, Workers: []int{0},
			Start: now, Expiry: now + 3600})
		for {
			if l, _ := j.Lease(); l.Round == i {
				break
			}
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				b.Fatalf("round %d not applied", i)
			}
			ch = j.Changed()
		}
	}
}

// BenchmarkLeaseFD_RenewalThroughTheAgentsPipe: a renewal written on the
// pipe (as the agent's writer does) until the job applied it.
func BenchmarkLeaseFD_RenewalThroughTheAgentsPipe(b *testing.B) {
	c := sdktest.Start(b, sdktest.Config{Round: time.Hour})
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		b.Fatal(err)
	}
	w := os.NewFile(uintptr(fds[1]), "write end")
	defer w.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(fds[0], &st); err != nil {
		b.Fatal(err)
	}
	b.Setenv(sdk.EnvLeaseFD, fmt.Sprintf("%d:%d", fds[0], st.Ino))
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "bench-pipe"), sdk.WithEpochs(10))...)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	if !j.Relayed() {
		b.Fatal("the pipe was not taken")
	}
	benchRenewals(b, j, func(l protocol.Lease) {
		data, _ := protocol.MarshalLease(&l)
		if _, err := w.Write(append(data, '\n')); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkLeaseFD_RenewalOverNATS: the same renewal published on the
// job's lease subject, as the coordinator does for a job that is not
// relayed.
func BenchmarkLeaseFD_RenewalOverNATS(b *testing.B) {
	c := sdktest.Start(b, sdktest.Config{Round: time.Hour})
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "bench-nats"), sdk.WithEpochs(10))...)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	nc := c.Client()
	benchRenewals(b, j, func(l protocol.Lease) { c.PublishLease(nc, l) })
}
