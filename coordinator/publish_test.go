package coordinator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// TestPublish_EveryJobsLeasesArriveInRoundOrderOverSeveralConnections:
// with the publisher's leases spread over one or four connections, every
// registered job gets its reply and a lease, and a job's leases arrive in
// the order of their rounds — a job's messages always take the same
// connection — while rounds of many jobs are published.
func TestPublish_EveryJobsLeasesArriveInRoundOrderOverSeveralConnections(t *testing.T) {
	for _, conns := range []int{1, 4} {
		t.Run(fmt.Sprintf("conns=%d", conns), func(t *testing.T) {
			e := newEnv(t, 24, func(_ *EmbeddedConfig, s *ServiceConfig) { s.LeaseConns = conns })
			nc := e.client()
			var mu sync.Mutex
			rounds := map[string][]int{}
			if _, err := nc.Subscribe(e.subj.AllLeases(), func(m *nats.Msg) { // one handler: arrival order
				l, err := protocol.DecodeLease(m.Data, 0)
				if err != nil {
					t.Errorf("bad lease %s: %v", m.Data, err)
					return
				}
				mu.Lock()
				rounds[l.Job] = append(rounds[l.Job], l.Round)
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			const jobs = 24
			for i := range jobs {
				if rep := register(t, nc, e.subj, newJob(fmt.Sprintf("p%02d", i), 1)); rep.Error != nil {
					t.Fatalf("registration: %+v", rep.Error)
				}
			}
			eventually(t, 20*time.Second, "every job has a lease, and more rounds pass", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(rounds) == jobs
			})
			after := e.svc.Health().Rounds
			eventually(t, 20*time.Second, "five more rounds", func() bool { return e.svc.Health().Rounds >= after+5 })
			time.Sleep(100 * time.Millisecond) // the last round's leases arrive
			mu.Lock()
			defer mu.Unlock()
			many := 0
			for job, rs := range rounds {
				if len(rs) > 1 {
					many++
				}
				for i := 1; i < len(rs); i++ {
					if rs[i] < rs[i-1] {
						t.Fatalf("job %s got the lease of round %d after that of round %d: %v", job, rs[i], rs[i-1], rs)
					}
				}
			}
			if many < jobs/2 {
				t.Fatalf("only %d of %d jobs got more than one lease: %v", many, jobs, rounds)
			}
		})
	}
}

// TestPublish_AJobsLeasesKeepTheirOrderAcrossTheConnections drives the
// publisher directly: ten batches of leases for 500 jobs, queued back to
// back and spread over four connections, arrive at one subscriber with
// every job's leases in the order they were queued; the round batches are
// measured once, after all four connections flushed.
func TestPublish_AJobsLeasesKeepTheirOrderAcrossTheConnections(t *testing.T) {
	_, nc := embeddedConn(t, EmbeddedConfig{DataDir: t.TempDir(), DontListen: true})
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	var mu sync.Mutex
	got := map[string][]int{}
	total := 0
	if _, err := nc.Subscribe(subj.AllLeases(), func(m *nats.Msg) {
		l, err := protocol.DecodeLease(m.Data, 0)
		if err != nil {
			t.Errorf("bad lease: %v", err)
			return
		}
		mu.Lock()
		got[l.Job] = append(got[l.Job], l.Round)
		total++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	measured := make(chan int, 16)
	s := &Service{nc: nc, subj: subj, m: NewMetrics(nil), leaseq: make(chan leaseBatch, 64)}
	s.cfg.onRound = func(r *Round, _ roundTimes) { measured <- r.Index }
	shards, closeShards := s.openShards(4)
	defer closeShards()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.publishing(ctx, shards)
	}()
	const jobs, batches = 500, 10
	for k := range batches {
		b := leaseBatch{}
		for i := range jobs {
			b.leases = append(b.leases, protocol.Lease{V: protocol.Version, Job: fmt.Sprintf("job-%04d", i),
				Round: k, Action: protocol.Run, Start: 1, Expiry: 2, Workers: []int{0}})
		}
		if k%2 == 1 {
			b.round = &Round{Index: k, Plan: &policy.Plan{}}
		}
		s.enqueueLeases(b)
	}
	for range batches / 2 {
		select {
		case <-measured:
		case <-time.After(60 * time.Second):
			t.Fatal("a round batch was not measured")
		}
	}
	eventually(t, 60*time.Second, "every lease", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total == jobs*batches
	})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for job, rs := range got {
		for i, r := range rs {
			if r != i {
				t.Fatalf("job %s got its leases in the order %v", job, rs)
			}
		}
	}
	select {
	case r := <-measured:
		t.Fatalf("round %d measured twice", r)
	default:
	}
}

// TestPublish_AJobsRepliesAndLeasesAllTakeOneConnectionInOrder: the
// dispatcher puts every message of a job — its registration reply and its
// leases from every batch — on the same connection's queue, in the order
// they were queued, and a round's batch on every connection (each flushes
// it); a batch from an ended leadership term goes nowhere.
func TestPublish_AJobsRepliesAndLeasesAllTakeOneConnectionInOrder(t *testing.T) {
	s := &Service{m: NewMetrics(nil)}
	shards := make([]*shard, 4)
	for i := range shards {
		shards[i] = &shard{q: make(chan leaseBatch, 1000)}
	}
	ctx := context.Background()
	const jobs = 50
	id := func(i int) string { return fmt.Sprintf("job-%02d", i) }
	for i := range jobs {
		s.dispatch(ctx, leaseBatch{reply: "_INBOX.x", job: id(i), answer: &protocol.RegisterReply{V: protocol.Version}}, shards)
	}
	for k := range 6 {
		b := leaseBatch{}
		for i := range jobs {
			b.leases = append(b.leases, protocol.Lease{Job: id(i), Round: k})
		}
		if k%2 == 0 {
			b.round = &Round{Index: k}
		}
		s.dispatch(ctx, b, shards)
	}
	s.gen.Add(1)
	s.dispatch(ctx, leaseBatch{leases: []protocol.Lease{{Job: id(0), Round: 99}}}, shards)
	where := map[string]int{}
	seen := map[string][]int{} // -1: the reply
	for k, sh := range shards {
		rounds := 0
		for len(sh.q) > 0 {
			b := <-sh.q
			if b.reply != "" {
				seen[b.job] = append(seen[b.job], -1)
				where[b.job+" reply"] = k
				continue
			}
			if b.round != nil {
				rounds++
			}
			for _, l := range b.leases {
				seen[l.Job] = append(seen[l.Job], l.Round)
				if w, ok := where[l.Job+" reply"]; !ok || w != k {
					t.Fatalf("job %s: lease of round %d on connection %d, its reply on %d", l.Job, l.Round, k, w)
				}
			}
		}
		if rounds != 3 {
			t.Errorf("connection %d got %d of the 3 round batches", k, rounds)
		}
	}
	used := map[int]bool{}
	for i := range jobs {
		used[where[id(i)+" reply"]] = true
		if got := fmt.Sprint(seen[id(i)]); got != "[-1 0 1 2 3 4 5]" {
			t.Fatalf("job %s: messages in the order %s", id(i), got)
		}
	}
	if len(used) != len(shards) {
		t.Errorf("50 jobs used %d of %d connections", len(used), len(shards))
	}
}
