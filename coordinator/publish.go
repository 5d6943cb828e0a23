package coordinator

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Leases and registration replies leave the loop: it queues them
// (enqueueLeases) and the publisher sends them, so that a slow connection
// to the server (an in-process pipe when the server is embedded, a busy
// server) holds the publisher and not the loop. The publisher spreads
// them over DefaultLeaseConns connections of their own, by job id: the
// server takes each connection's messages on one goroutine, so one
// connection makes a round's thousands of leases wait for one goroutine
// of the server, several let it use several cores; and the flush ending a
// round does not queue behind the log records the server delivers to the
// consumer on the service's connection (docs/scale.md). A job's leases
// and its registration reply always take the same connection, in the
// order the loop queued them.

// DefaultLeaseConns is how many connections the publisher opens.
const DefaultLeaseConns = 4

// publishLeases hands leases to the publisher, which sends each on its
// job's lease subject, in the order they were handed over.
func (s *Service) publishLeases(leases []protocol.Lease) {
	if len(leases) > 0 {
		s.enqueueLeases(leaseBatch{leases: leases})
	}
}

// leaseBatch is leases to publish: a round's (round set; flushed, and the
// tick to last lease measured) or those an event or a start produced.
type leaseBatch struct {
	leases []protocol.Lease
	// desired are the nodes' desired states of a round, sent with its
	// leases (the agents that relay carry their jobs' leases).
	desired []*protocol.NodeDesired
	round   *Round
	times   roundTimes
	gen     uint64 // the leadership term they were made in (Service.gen)
	// A registration's reply instead of leases: sent whatever the term (the
	// registration is in the log, the reply says so).
	reply  string
	answer *protocol.RegisterReply
	job    string
	// done is called once a shard sent its part of a round (at sent) and
	// flushed.
	done func(sent time.Time)
}

// roundTimes are the steps of a live round from its timer to its last
// lease flushed (docs/scale.md): the tick record's trip through the log,
// the policy's solve (off the loop), the loop noticing its end, the plan
// record's trip through the log, the round's close on the loop (placement,
// repair, leases: EndTick, and the records held while the round was open),
// then the publisher sending the leases.
type roundTimes struct {
	Fired    time.Time     // the timer fired; the tick record was appended
	Opened   time.Time     // the tick record came back: the round opened and its solve started
	Solve    time.Duration // the policy's Admit calls and Allocate
	Admitted time.Duration // of which the held calls and the Admit calls
	// SolveBegan is when the solve's goroutine started (the round opened
	// before: the tick's fold on the loop, then the goroutine's wait to run).
	SolveBegan time.Time
	PlanAsked  time.Time // the loop saw the solve end and appended the plan record
	PlanBack   time.Time // the plan record came back
	Closed     time.Time // the round was closed
	Queued     time.Time // its leases and nodes' desired states were queued for the publisher
	Sent       time.Time // the last shard handed its last lease to its connection (its flush follows)
	Published  time.Time // the last lease was flushed to the server
	// GCAtFire is the process's completed collections when the timer
	// fired, GCCycles how many completed between then and Published
	// (gchold.go: with the hold on, a round should see none).
	GCAtFire, GCCycles uint64

	// What the round sent: leases published on the jobs' subjects, leases
	// left to the agents that relay them, leases held for submitted jobs
	// no process of which has registered yet, and nodes' desired states.
	Leases, Relayed, Held, Desired int
}

// Total is the round's tick → last lease.
func (t roundTimes) Total() time.Duration { return t.Published.Sub(t.Fired) }

func (s *Service) enqueueLeases(b leaseBatch) {
	b.gen = s.gen.Load()
	s.leaseq <- b
}

// shard is one of the publisher's connections and its queue.
type shard struct {
	nc *nats.Conn
	q  chan leaseBatch
}

// openShards opens the publisher's connections with the service's
// connection's options (same server, same rights); where one cannot be
// opened the service's connection serves instead.
func (s *Service) openShards(n int) (shards []*shard, closeAll func()) {
	var opened []*nats.Conn
	for range max(n, 1) {
		o := s.nc.Opts
		o.Name += " (leases)"
		nc, err := o.Connect()
		if err != nil {
			s.log.Warn().Err(err).Msg("cannot open a connection for leases; publishing them on the service's")
			nc = s.nc
		} else {
			opened = append(opened, nc)
		}
		shards = append(shards, &shard{nc: nc, q: make(chan leaseBatch, 1024)})
	}
	return shards, func() {
		for _, nc := range opened {
			_ = nc.FlushTimeout(time.Second)
			nc.Close()
		}
	}
}

// publishing hands what the loop queued to the shards, a job's always to
// the same one, and measures each round once every shard sent and flushed
// its part. Leases of a term that ended (the coordinator was deposed) are
// dropped, here and by the shards.
func (s *Service) publishing(ctx context.Context, shards []*shard) {
	var wg sync.WaitGroup
	for _, sh := range shards {
		wg.Go(func() { s.sendShard(ctx, sh) })
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-s.leaseq:
			s.dispatch(ctx, b, shards)
		}
	}
}

// dispatch hands one queued batch to the shards: a reply to its job's, a
// batch of leases split by job, a round's part to every shard (each
// flushes and reports, the last measures the round).
func (s *Service) dispatch(ctx context.Context, b leaseBatch, shards []*shard) {
	if b.reply != "" {
		s.toShard(ctx, shards[shardOf(b.job, len(shards))], b)
		return
	}
	if b.gen != s.gen.Load() {
		return
	}
	parts := make([][]protocol.Lease, len(shards))
	for _, l := range b.leases {
		i := shardOf(l.Job, len(shards))
		parts[i] = append(parts[i], l)
	}
	desired := make([][]*protocol.NodeDesired, len(shards))
	for _, d := range b.desired {
		i := shardOf(d.Node, len(shards))
		desired[i] = append(desired[i], d)
	}
	var done func(time.Time)
	if b.round != nil {
		done = s.roundDone(b, len(shards))
	}
	for i, sh := range shards {
		if len(parts[i]) > 0 || len(desired[i]) > 0 || done != nil {
			s.toShard(ctx, sh, leaseBatch{leases: parts[i], desired: desired[i], round: b.round, gen: b.gen, done: done})
		}
	}
}

func (s *Service) toShard(ctx context.Context, sh *shard, b leaseBatch) {
	select {
	case sh.q <- b:
	case <-ctx.Done():
	}
}

// shardOf is the shard of a job's messages.
func shardOf(job string, n int) int {
	if n == 1 {
		return 0
	}
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(job); i++ {
		h = (h ^ uint32(job[i])) * 16777619
	}
	return int(h % uint32(n))
}

// sendShard publishes one shard's queue in order.
func (s *Service) sendShard(ctx context.Context, sh *shard) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-sh.q:
			if b.reply != "" {
				data, _ := json.Marshal(b.answer)
				if err := sh.nc.Publish(b.reply, data); err != nil {
					s.log.Warn().Err(err).Str("job", b.job).Msg("cannot answer a registration")
				}
				continue
			}
			if b.gen == s.gen.Load() {
				for i := range b.leases {
					l := &b.leases[i]
					data, _ := protocol.MarshalLease(l)
					if err := sh.nc.Publish(s.subj.Lease(l.Job), data); err != nil {
						s.log.Warn().Err(err).Str("job", l.Job).Msg("cannot publish a lease")
						continue
					}
					s.m.observeLease(l)
				}
				for _, d := range b.desired {
					data, _ := json.Marshal(d)
					if err := sh.nc.Publish(s.subj.Desired(d.Node), data); err != nil {
						s.log.Warn().Err(err).Str("node", d.Node).Msg("cannot publish the desired state")
					}
				}
			}
			if b.done != nil {
				sent := time.Now()
				if err := sh.nc.FlushTimeout(5 * time.Second); err != nil {
					s.log.Warn().Err(err).Msg("flushing leases")
				}
				b.done(sent)
			}
		}
	}
}

// roundDone returns what each of n shards calls when it sent and flushed
// its part of round b; the last call measures the round.
func (s *Service) roundDone(b leaseBatch, n int) func(time.Time) {
	var mu sync.Mutex
	left := n
	return func(sent time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if sent.After(b.times.Sent) {
			b.times.Sent = sent
		}
		if left--; left == 0 && b.gen == s.gen.Load() { // a deposed leader's round was not sent
			s.roundPublished(b)
		}
	}
}

// roundPublished measures the time from a round's tick to its last lease
// flushed to the server.
func (s *Service) roundPublished(b leaseBatch) {
	t := b.times
	t.Published = time.Now()
	t.GCCycles = gcCycles() - t.GCAtFire
	rd, published := b.round, t.Total()
	s.m.tickToLease.Observe(published.Seconds())
	if t.GCCycles > 0 {
		s.m.roundsCollected.Inc()
	}
	if s.cfg.onRound != nil {
		s.cfg.onRound(rd, t)
	}
	s.gc.end()
	s.log.Info().Int("round", rd.Index).Int("active", rd.Active).Int("leases", len(rd.Leases)).
		Strs("run", rd.Plan.Run).Bool("solved", rd.Plan.Solved).Float64("solve_s", t.Solve.Seconds()).Float64("tick_to_last_lease_s", published.Seconds()).Uint64("gc_cycles", t.GCCycles).Msg("round")
}
