package coordinator

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// keepTraining publishes a progress batch for job every 50 ms until the
// test ends.
func keepTraining(t *testing.T, e *env, job string) {
	nc := e.client()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		var seq uint64
		for ctx.Err() == nil {
			seq++
			publishBatch(t, nc, e.subj, job, progress(seq, 10, int64(seq)*10, 0.05))
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// TestLeaseRounds_ANewLogSendsARunningJobALeaseEveryOtherRound: by default
// a new log's RUN leases cover three rounds and the grace; the only job of
// a one-GPU cluster, training all along, is sent a lease in about every
// other round (a round that starts late renews early), and the renewals
// not sent are counted.
func TestLeaseRounds_ANewLogSendsARunningJobALeaseEveryOtherRound(t *testing.T) {
	const round = 0.3
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.RoundSeconds = round })
	nc := e.client()
	leases := watchLeases(t, nc, e.subj.Lease("a"))
	register(t, nc, e.subj, newJob("a", 1))
	keepTraining(t, e, "a")
	eventually(t, 10*time.Second, "the first lease", func() bool { return len(leases.all()) > 0 })
	first := e.svc.Health().Rounds
	time.Sleep(20 * round * time.Second)
	rounds := e.svc.Health().Rounds - first
	got := leases.all()
	for _, l := range got {
		if l.Action != protocol.Run || math.Abs(l.Expiry-l.Start-(3*round+round/4)) > 1e-6 {
			t.Fatalf("lease %+v: want RUN leases of three rounds and a quarter", l)
		}
	}
	sent := int64(len(got) - 1)
	if rounds < 15 || float64(sent) > 0.7*float64(rounds) || sent < rounds/3 {
		t.Fatalf("%d leases sent in %d rounds; want about one every other round (%s)", sent, rounds, leases)
	}
	if n := counterValue(t, e.reg, "shockwave_leases_covered_total", "", ""); n < float64(rounds)/3 {
		t.Errorf("%v covered renewals counted in %d rounds", n, rounds)
	}
	t.Logf("%d leases sent in %d rounds", sent, rounds)
}

// TestLeaseRounds_ALogKeepsTheLeaseRoundsItWasWrittenWith: a log of
// one-round leases (as every log from before leases of several rounds)
// continues with them when the setting is left unset; set to another
// value, the coordinator refuses to start and names the log's.
func TestLeaseRounds_ALogKeepsTheLeaseRoundsItWasWrittenWith(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.LeaseRounds = 1 })
	nc := e.client()
	register(t, nc, e.subj, newJob("a", 1))
	keepTraining(t, e, "a")
	eventually(t, 10*time.Second, "two rounds", func() bool { return e.svc.Health().Rounds >= 2 })
	e.stopService()

	e.scfg.Core.LeaseRounds = 0
	leases := watchLeases(t, nc, e.subj.Lease("a"))
	e.startService()
	eventually(t, 10*time.Second, "a lease from the restarted coordinator", func() bool { return len(leases.all()) > 1 })
	for _, l := range leases.all() {
		if math.Abs(l.Expiry-l.Start-testRound*1.25) > 1e-6 {
			t.Fatalf("lease %+v after the restart: want one round and a quarter", l)
		}
	}
	e.stopService()

	e.scfg.Core.LeaseRounds = 3
	owner, err := e.emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	svc, err := NewService(owner, e.scfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := svc.Run(ctx); err == nil || !strings.Contains(err.Error(), "lease rounds 1") {
		t.Fatalf("lease rounds 3 on a log of 1: %v", err)
	}
}
