package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestService_ANATSRestartLosesNoJob runs the coordinator against an
// external NATS server (the --nats-url mode), restarts that server twice
// mid-run, and checks that no registered job is lost and rounds go on.
func TestService_ANATSRestartLosesNoJob(t *testing.T) {
	dir, listen := t.TempDir(), freeAddr(t)
	startNATS := func() *Embedded {
		emb, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		return emb
	}
	srv := startNATS()
	defer func() { srv.Shutdown() }()
	url := "nats://" + listen
	reconnect := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectBufSize(64 << 20)}
	owner, err := nats.Connect(url, append(reconnect, coordinatorToken(t, dir))...)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	reg := prometheus.NewRegistry()
	svc, err := NewService(owner, ServiceConfig{Core: Config{GPUs: 2, RoundSeconds: testRound, JobTimeoutSeconds: 60},
		Policy: "shockwave", Metrics: NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	nc := dialEventually(t, url)
	waitServing(t, nc, subj)
	_, stop := startJobs(t, nc, subj, []string{"p", "q", "r"}, 1)
	defer stop()
	for i := range 2 {
		eventually(t, 10*time.Second, "rounds go on", func() bool { return svc.Health().Rounds >= int64(5*(i+1)) })
		srv.Shutdown()
		srv = startNATS()
		eventually(t, 20*time.Second, "the service reconnects", func() bool { return svc.Health().OK })
	}
	rounds := svc.Health().Rounds
	eventually(t, 20*time.Second, "rounds after the restarts", func() bool { return svc.Health().Rounds >= rounds+3 })
	late := register(t, nc, subj, newJob("late", 1))
	if late.Error != nil {
		t.Fatalf("registration after the restarts: %v", late.Error)
	}
	st := status(t, nc, subj)
	for _, id := range []string{"p", "q", "r", "late"} {
		if r, ok := jobRow(st, id); !ok || (r.State != "active" && r.State != "pending") {
			t.Errorf("job %s after two NATS restarts: %+v", id, r)
		}
	}
	ref, _ := reference(t, dialEventually(t, url, coordinatorToken(t, dir)), subj.Prefix, st.LogSeq)
	sameState(t, st, ref)
}
