package coordinator

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// BenchmarkRegistrations_TwoThousandAtOnce: 2,000 new jobs register at
// once with a live coordinator on the embedded server, and an operation is
// the time until every one of them is answered (registered in the log,
// folded, replied to): with the registrations gathered into records
// (carried, the default window of 1 ms) and one record each (single). The
// requests come from a client of the coordinator's own account, which no
// per-client registration budget limits. It reports registrations a
// second and log records a registration.
func BenchmarkRegistrations_TwoThousandAtOnce(b *testing.B) {
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"carried", 0}, {"single", -1}} {
		b.Run(c.name, func(b *testing.B) { benchRegistrations(b, 2000, c.window) })
	}
}

func benchRegistrations(b *testing.B, n int, window time.Duration) {
	emb, coord := embeddedConn(b, EmbeddedConfig{DataDir: b.TempDir(), DontListen: true, FloodLimit: -1})
	cfg := ServiceConfig{Core: Config{GPUs: 64, RoundSeconds: 3600}, Policy: "gandiva_fair", CarryWindow: window, MaxJobs: 1 << 20}
	svc, err := NewService(coord, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	eventually(b, 10*time.Second, "the service serves", func() bool { return svc.Health().OK })
	client, err := emb.Connect()
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	var answered, refused atomic.Int64
	inbox := nats.NewInbox()
	sub, err := client.Subscribe(inbox, func(m *nats.Msg) {
		if rep, err := protocol.DecodeRegisterReply(m.Data, 1<<20); err != nil || rep.Error != nil {
			refused.Add(1)
		}
		answered.Add(1)
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	subj := svc.subj
	regs := make([][]byte, 0, n)
	seq := 0
	first := svc.seq.Load()
	sent := 0
	for b.Loop() {
		b.StopTimer()
		regs = regs[:0]
		for range n {
			regs = append(regs, mustJSON(b, newJob(fmt.Sprintf("job-%06d", seq), 1)))
			seq++
		}
		b.StartTimer()
		for _, data := range regs {
			if err := client.PublishRequest(subj.Register(), inbox, data); err != nil {
				b.Fatal(err)
			}
		}
		sent += n
		eventually(b, time.Minute, "every registration answered", func() bool { return answered.Load() >= int64(sent) })
	}
	if refused.Load() > 0 {
		b.Fatalf("%d of %d registrations refused", refused.Load(), sent)
	}
	records := svc.seq.Load() - first
	b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "registrations/s")
	b.ReportMetric(float64(records)/float64(sent), "records/registration")
}
