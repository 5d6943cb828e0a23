package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Service is the coordinator service: one goroutine (Run) owns the Core and
// does all its I/O in a select loop, in the shape of etcd raft's node.run.
// NATS handlers only decode requests and hand them over; the log stream
// delivers every input of Core in order; a timer decides when rounds start.
type Service struct {
	cfg  ServiceConfig
	nc   *nats.Conn
	js   jetstream.JetStream
	subj protocol.Subjects
	log  zerolog.Logger
	m    *Metrics
	// rejectLog is log, sampled: a misbehaving job cannot flood the log.
	rejectLog zerolog.Logger

	fold      *fold
	in        chan record
	statusq   chan statusRequest
	snapq     chan roundSummary
	tables    chan []JobStatus // job tables the writer is done with, for the next rounds' summaries
	stateq    chan stateWrite  // encoded state snapshots for the writer (recovery.go)
	ticked    chan error       // result of publishing a tick record
	planned   chan error       // result of publishing a plan record
	leaseq    chan leaseBatch  // leases for the publisher (handlers.go)
	gen       atomic.Uint64    // leadership terms ended: leases of an earlier one are not sent
	agentq    chan agentRequest
	agents    agentState                     // node liveness, owned by the loop (agents.go)
	uplink    uplinkState                    // agents' events budgets, owned by the agents handler (uplink.go)
	carrier   *gatherer[carriedBatch]        // gathers the batches agents carry into log records (carry.go)
	registrar *gatherer[carriedRegistration] // gathers registrations into log records (carryreg.go)

	// Owned by the loop.
	live       bool
	catchUp    uint64        // the log's last sequence at start: the replay ends there
	started    time.Time     // start of the replay
	expect     *Snapshot     // the stored snapshot, verified during the replay
	tickRound  int           // round of the tick record in flight, -1 if none
	tickFired  time.Time     // when the timer fired for it
	tickWanted time.Time     // when the next tick is due
	roundFired time.Time     // when the timer fired for the open round
	tickGC     uint64        // the process's collections when the timer fired (gcCycles)
	roundGC    uint64        // the same for the open round
	roundOpen  time.Time     // when its tick record came back
	planAsked  time.Time     // when its solve ended and the plan record was appended
	stepStart  time.Time     // when the loop began its current step
	planSent   int           // the open round whose plan record this leader appended, -1 if none
	snapDue    bool          // a forced snapshot waits for the open round to close
	snapLater  time.Time     // a due snapshot waits for the round's burst to pass (zero: none; recovery.go)
	snapCarry  bool          // a round opened before it: the next plan schedules it again
	snapAt     time.Time     // when the last snapshot was encoded
	snapTook   time.Duration // how long it held the loop
	snapPolicy atomic.Int64  // how long saving the policy's state took, off the loop (ns)
	deadline   time.Time     // what the timer is set to
	gc         *gcHold       // the collector held off around rounds (gchold.go)
	web        webLog        // recent rounds for the web view
	start      *startState
	fatal      error // an integrity failure found while replaying: Run returns it
	store      *storage
	snaps      *snapshotStore
	runCtx     context.Context

	refused  atomic.Pointer[string] // why the service refused to serve
	recovery string                 // what a recovery lost (loop-owned)
	recMsg   atomic.Pointer[string]

	// Leadership and writes (leader.go, writes.go).
	nonce    string // random per process: the leader id and message-id prefix
	writes   atomic.Uint64
	lead     *leadership
	elected  chan uint64
	deposed  chan error
	epoch    uint64 // owned by the loop: the epoch held, 0 when standby
	subs     []*nats.Subscription
	logEpoch atomic.Uint64 // the highest epoch the log has seen
	failing  atomic.Bool   // the last coordinator write failed
	standby  atomic.Bool
	admit    admission

	ready  atomic.Bool
	seq    atomic.Uint64
	rounds atomic.Int64
}

type statusRequest struct {
	msg   *nats.Msg
	req   *protocol.StatusRequest
	web   chan<- WebState // set for the web view instead of msg
	shown int             // the web view: the rows of the job table it shows
}

// NewService returns a service that will talk over nc. Run starts it.
func NewService(nc *nats.Conn, cfg ServiceConfig) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	subj, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	return &Service{
		nonce: nonce, elected: make(chan uint64, 1), deposed: make(chan error, 1),
		admit: admission{perClient: map[string]int{}},
		cfg:   cfg, nc: nc, js: js, subj: subj, log: *cfg.Logger, m: cfg.Metrics,
		rejectLog: cfg.Logger.Sample(&zerolog.BurstSampler{Burst: 20, Period: time.Second}),
		fold:      newFold(subj, cfg.MaxMessageBytes),
		in:        make(chan record, 4096),
		statusq:   make(chan statusRequest, 64),
		snapq:     make(chan roundSummary, 1),
		tables:    make(chan []JobStatus, 2),
		stateq:    make(chan stateWrite, 1),
		ticked:    make(chan error, 1),
		agentq:    make(chan agentRequest, 256),
		agents:    agentState{seen: map[string]time.Time{}, leaving: map[string]bool{}},
		tickRound: -1,
		planSent:  -1,
		planned:   make(chan error, 1),
		leaseq:    make(chan leaseBatch, 4096),
		gc:        &gcHold{off: cfg.KeepGCPercent},
		carrier:   newGatherer[carriedBatch](cfg.CarryWindow, cfg.MaxMessageBytes),
		registrar: newGatherer[carriedRegistration](cfg.CarryWindow, cfg.MaxMessageBytes),
	}, nil
}

// Config returns the validated configuration, defaults filled in.
func (s *Service) Config() ServiceConfig { return s.cfg }

// Run replays the log, then serves until ctx is done. It returns nil after
// a clean shutdown, or the error that stopped it.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.ready.Store(false)
	defer s.gc.stop()
	s.runCtx = ctx
	st, err := openStorage(ctx, s.js, s.subj, &s.cfg)
	if err != nil {
		return err
	}
	if s.lead, err = openLeadership(ctx, s.js, s.subj, &s.cfg, s.nonce); err != nil {
		return err
	}
	s.lead.floor, s.lead.server = s.logEpoch.Load, s.nc.ConnectedServerId
	snaps, err := openSnapshotStore(ctx, s.js, s.subj.Prefix, &s.cfg)
	if err != nil {
		return err
	}
	s.store, s.snaps, s.runCtx = st, snaps, ctx
	s.started = time.Now()
	ss, err := s.planStart(ctx, st, snaps)
	if err != nil {
		msg := err.Error()
		s.refused.Store(&msg)
		return err
	}
	s.seq.Store(s.fold.seq)
	s.learnKnown()
	if err := s.checkConfig(ctx, st); err != nil {
		return err
	}
	if s.catchUp, err = st.lastSeq(ctx); err != nil {
		return err
	}
	s.log.Info().Str("stream", st.name).Uint64("snapshot_seq", ss.restored).Uint64("from", ss.from).
		Uint64("to", s.catchUp).Msg("restored the newest snapshot; replaying the log after it")
	// Even with nothing to replay, the service goes live only once it leads
	// and its leader record came back through the log (leader.go).
	cons, err := s.js.OrderedConsumer(ctx, st.name, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: ss.from})
	if err != nil {
		return fmt.Errorf("coordinator: log consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { s.receive(ctx, m) },
		jetstream.PullMaxMessages(cmp.Or(s.cfg.logPull, jetstream.DefaultMaxMessages)),
		jetstream.PullExpiry(logPullExpiry), jetstream.PullHeartbeat(logPullExpiry/4),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.m.logConsumer.WithLabelValues(consumerError(err)).Inc()
			s.log.Warn().Err(err).Msg("log consumer")
		}))
	if err != nil {
		return fmt.Errorf("coordinator: log consumer: %w", err)
	}
	defer cc.Stop()
	shards, closeShards := s.openShards(s.cfg.LeaseConns)
	defer closeShards()
	var wg sync.WaitGroup
	wg.Go(func() { s.writeSnapshots(ctx, st) })
	wg.Go(func() { s.writeStates(ctx, st, snaps) })
	wg.Go(func() { s.lead.run(ctx, s.elected, s.deposed) })
	wg.Go(func() { s.publishing(ctx, shards) })
	wg.Go(func() { s.carry(ctx, s.carrier) })
	wg.Go(func() { s.carryRegistrations(ctx, s.registrar) })
	err = s.loop(ctx)
	if err != nil {
		msg := err.Error()
		s.refused.Store(&msg)
	}
	s.unsubscribe()
	cancel()
	wg.Wait()
	return err
}

// checkConfig appends the configuration record to a new log, and refuses a
// log written with another configuration.
func (s *Service) checkConfig(ctx context.Context, st *storage) error {
	mine, err := newConfigRecord(s.cfg.Core, s.cfg.Policy, s.cfg.PolicyOptions)
	if err != nil {
		return err
	}
	logged, err := st.loggedConfig(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: reading the log's configuration: %w", err)
	}
	if logged == nil && s.fold.cfg != nil {
		logged = s.fold.cfg // the log was compacted: the snapshot carries its configuration
	}
	if logged != nil {
		if s.cfg.leaseRoundsUnset { // continue with the log's
			mine.LeaseRounds = logged.LeaseRounds
		}
		if s.cfg.keepEndedUnset { // continue with the log's
			mine.KeepEnded = logged.KeepEnded
		}
		if s.cfg.ReallocateFromLog && mine.Reallocate != logged.Reallocate {
			s.log.Info().Bool("reallocate_on_change", logged.Reallocate).Msg("continuing with the log's re-allocation rule")
			mine.Reallocate = logged.Reallocate
		}
		if !sameRules(logged, &mine) {
			return fmt.Errorf("coordinator: the log %s was written with --gpus %d (cluster %s) --round %gs --policy %s (job timeout %gs, lease grace %gs, lease rounds %d, re-allocate on change %v, ended jobs kept %s, policy config %s); "+
				"restart with the same settings, or start a new log (another --data-dir or --prefix)",
				st.name, logged.GPUs, logged.clusterString(), logged.RoundSeconds, logged.Policy, logged.JobTimeout, logged.LeaseGrace,
				logged.leaseRounds(), logged.Reallocate, logged.keepEndedString(), orNone(logged.PolicyConfig))
		}
		if !sameConfig(logged, &mine) {
			s.log.Info().Str("log_cluster", logged.clusterString()).Msg("the cluster differs from the one the log started with; it is resized, if needed, once this coordinator leads")
		}
		return nil
	}
	data, _ := jsonMarshal(mine)
	return s.appendRetrying(ctx, s.subj.Prefix+"."+logConfig, data)
}

// logPullExpiry bounds each pull of the log consumer; its heartbeat is a
// quarter of it, and two missed heartbeats make the client recreate the
// consumer where it stopped. nats.go's consumer can stop asking for records
// after a burst (none waiting on the server while records are pending:
// BenchmarkRegistrations_TwoThousandAtOnce, a record each, stalled 10 s
// with the default heartbeat of 5 s); this bounds such a stall to a second.
const logPullExpiry = 2 * time.Second

// consumerError names the class of a log consumer's error for
// shockwave_log_consumer_errors_total.
func consumerError(err error) string {
	switch {
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		return "no_heartbeat"
	case errors.Is(err, jetstream.ErrConsumerDeleted):
		return "consumer_deleted"
	}
	return "other"
}

// receive runs on the consumer's goroutine: it hands a record to the loop.
func (s *Service) receive(ctx context.Context, m jetstream.Msg) {
	r, err := recordOf(m)
	if err != nil {
		s.log.Error().Err(err).Msg("log record without metadata")
		return
	}
	if _, ok := s.subj.EventsJob(r.Subject); ok {
		// Decoding is most of an event's cost: done here, the loop only
		// folds (the fold decodes the same bytes to the same batch).
		r.batch, r.decErr = protocol.DecodeBatch(r.Data, s.cfg.MaxMessageBytes)
	} else if isCarried(s.subj, r.Subject) {
		r.carried, r.decErr = unpackRecord(r, s.subj, s.cfg.MaxMessageBytes)
	}
	select {
	case s.in <- r:
	case <-ctx.Done():
	}
}

// subscribe starts answering subject with h (only the leader answers).
func (s *Service) subscribe(subject string, h nats.MsgHandler) {
	sub, err := s.nc.Subscribe(subject, h)
	if err != nil {
		s.log.Error().Err(err).Str("subject", subject).Msg("cannot subscribe")
		return
	}
	_ = sub.SetPendingLimits(64<<10, 64<<20)
	s.subs = append(s.subs, sub)
}

func (s *Service) unsubscribe() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.subs = nil
}

// loop is the one goroutine that owns the Core.
func (s *Service) loop(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	agentTick := time.NewTicker(max(s.cfg.AgentTimeout/4, 50*time.Millisecond))
	defer agentTick.Stop()
	snapTimer := time.NewTimer(time.Hour)
	snapTimer.Stop()
	defer snapTimer.Stop()
	var snapArmed time.Time
	for {
		var step string // what the loop did, for its step times
		select {
		case <-ctx.Done():
			s.log.Info().Int("next_round", s.nextRound()).Uint64("log_seq", s.fold.seq).Msg("coordinator stopping")
			return nil
		case r := <-s.in:
			s.stepStart = time.Now()
			step = s.handle(r)
			if s.fatal != nil {
				s.log.Error().Err(s.fatal).Msg("refusing to serve")
				return s.fatal
			}
		case req := <-s.statusq:
			s.stepStart, step = time.Now(), "status"
			s.answerStatus(req)
		case epoch := <-s.elected:
			s.elect(ctx, epoch)
		case err := <-s.deposed:
			s.depose(err)
		case req := <-s.agentq:
			s.stepStart, step = time.Now(), "agent"
			s.answerAgent(req)
		case <-agentTick.C:
			if s.live { // only the leader decides that a node left
				s.stepStart, step = time.Now(), "agents"
				s.checkAgents(ctx)
			}
		case err := <-s.ticked:
			if err != nil {
				s.log.Warn().Err(err).Int("round", s.tickRound).Msg("cannot log the round tick; retrying")
				s.tickRound = -1
				s.tickWanted = time.Now().Add(min(time.Second, s.roundLength()))
			}
		case <-s.fold.lent():
			s.stepStart, step = time.Now(), "policy_returned"
			s.fold.returnPolicy()
		case <-s.solved():
			s.stepStart, step = time.Now(), "solved"
			s.closeRound(ctx)
		case err := <-s.planned:
			if err != nil {
				s.log.Warn().Err(err).Int("round", s.planSent).Msg("cannot log the round's plan record; retrying")
				s.planSent = -1
			}
		case <-timer.C:
			s.deadline = time.Time{}
			s.stepStart, step = time.Now(), "timer"
			s.fireTick(ctx)
		case <-snapTimer.C:
			snapArmed = time.Time{}
			s.stepStart, step = time.Now(), "snapshot_timer"
			s.checkpointDue()
		}
		if step != "" {
			s.observeStep(step, time.Since(s.stepStart))
		}
		s.arm(timer)
		if !s.snapLater.Equal(snapArmed) {
			snapTimer.Stop()
			if snapArmed = s.snapLater; !snapArmed.IsZero() {
				snapTimer.Reset(max(time.Until(snapArmed), 0))
			}
		}
	}
}

// observeStep records how long one step held the loop.
func (s *Service) observeStep(kind string, d time.Duration) {
	s.m.loopStep.WithLabelValues(kind).Observe(d.Seconds())
	if s.cfg.onStep != nil {
		s.cfg.onStep(kind, d)
	}
}

// arm sets the timer to the next thing due: the next tick, or the retry of
// a tick record that did not come back.
func (s *Service) arm(timer *time.Timer) {
	if !s.live {
		return
	}
	due := s.tickWanted
	if s.tickRound >= 0 {
		due = s.tickFired.Add(max(2*time.Second, s.roundLength()))
	}
	if due.Equal(s.deadline) {
		return
	}
	timer.Stop()
	s.deadline = due
	timer.Reset(max(time.Until(due), 0))
	if s.tickRound < 0 { // a round's tick, not the retry of one
		s.gc.beforeTick(due, s.roundLength())
	}
}

func (s *Service) roundLength() time.Duration {
	return time.Duration(s.cfg.Core.RoundSeconds * float64(time.Second))
}

func (s *Service) nextRound() int {
	if s.fold.core == nil {
		return 0
	}
	return s.fold.core.NextRound()
}

// fireTick appends the next round's tick record to the log; the round
// starts when the record comes back through the consumer.
func (s *Service) fireTick(ctx context.Context) {
	if s.fold.core == nil || !s.live { // a deposed leader writes no tick
		return
	}
	if s.fold.open != nil { // the round is still solving: look again soon
		s.tickWanted = time.Now().Add(min(50*time.Millisecond, s.roundLength()))
		return
	}
	round := s.fold.core.NextRound()
	s.tickRound, s.tickFired, s.tickGC = round, time.Now(), gcCycles()
	s.gc.begin() // begun a lead before; again in case its timer ran late
	data, _ := jsonMarshal(tickRecord{V: protocol.Version, Round: round, Epoch: s.epoch, Open: true})
	go func() {
		err := s.append(ctx, s.subj.Prefix+"."+logTick, data, nil)
		if ctx.Err() == nil {
			s.ticked <- err
		}
	}()
}

// openRound notes a live round whose tick record came back: its solve
// runs while the loop folds events; the plan record closes it.
func (s *Service) openRound(o *outcome) {
	fired, gcs := s.tickFired, s.tickGC
	if s.tickRound < 0 {
		fired, gcs = time.Now(), gcCycles() // a tick we did not fire (a duplicate, or another coordinator's)
	}
	s.tickRound = -1
	if s.fold.open == nil {
		if o.err != nil {
			s.m.roundErrors.Inc()
			s.log.Error().Err(o.err).Msg("round failed")
		}
		s.tickWanted = time.Now().Add(s.roundLength())
		return
	}
	if o.err == nil {
		s.roundFired, s.roundOpen, s.roundGC = fired, s.stepStart, gcs
	}
	s.tickWanted = time.Now().Add(s.roundLength()) // set again when the round closes
}

// solved is the open round's solve, while this coordinator leads and has
// not appended the round's plan record yet (nil otherwise: no case).
func (s *Service) solved() <-chan struct{} {
	if !s.live || s.fold.open == nil || s.planSent == s.fold.open.t.Round() {
		return nil
	}
	return s.fold.open.done
}

// closeRound appends the plan record of the open round, whose solve ended;
// the round closes when the record comes back through the log.
func (s *Service) closeRound(ctx context.Context) {
	round := s.fold.open.t.Round()
	s.planSent, s.planAsked = round, s.stepStart
	if s.roundFired.IsZero() {
		s.roundFired, s.roundGC = time.Now(), gcCycles() // a round opened before this coordinator led
	}
	data, _ := jsonMarshal(planRecord{V: protocol.Version, Round: round, Epoch: s.epoch})
	go func() {
		err := s.append(ctx, s.subj.Prefix+"."+logPlan, data, nil)
		if err != nil {
			select { // the loop retries: not at once
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if ctx.Err() == nil {
			s.planned <- err
		}
	}()
}

// goLive ends the replay: the state is now what the old coordinator had.
func (s *Service) goLive() {
	s.live = true
	s.finishRecovery(s.runCtx, s.store, s.snaps)
	// The start-up checks are over: records folded from now on were read
	// live, and a leader deposed later folds on from where it is (checking
	// them against the start's expectations would report its own rounds as
	// a gap in the log).
	s.start = nil
	if s.recovery != "" {
		msg := s.recovery
		s.recMsg.Store(&msg)
	}
	took := time.Since(s.started)
	s.m.replaySeconds.Set(took.Seconds())
	s.log.Info().Uint64("records", s.fold.seq).Float64("took_s", took.Seconds()).Int("next_round", s.nextRound()).Uint64("epoch", s.epoch).Msg("log replayed; serving")
	s.subscribe(s.subj.Register(), s.onRegister)
	if agents, err := s.subscribeAgents(); err != nil {
		s.log.Error().Err(err).Msg("cannot subscribe to the agents' subjects")
	} else {
		s.subs = append(s.subs, agents...)
	}
	// The server knows the subscriptions before /healthz says OK: a job
	// that registers then finds a responder.
	if err := s.nc.FlushTimeout(time.Second); err != nil {
		s.log.Warn().Err(err).Msg("flushing the subscriptions")
	}
	s.resizeIfNeeded(s.runCtx)
	now := time.Now()
	s.tickWanted = now.Add(s.roundLength())
	if last := s.fold.last; last != nil {
		// An overdue round waits a little (a round, at most 3 s), so that
		// jobs reconnect and report before silence makes them lost.
		grace := min(s.roundLength(), 3*time.Second)
		s.tickWanted = wall(last.Start).Add(s.roundLength())
		if s.tickWanted.Before(now.Add(grace)) {
			s.tickWanted = now.Add(grace)
		}
		if now.Before(wall(lastExpiry(last))) {
			s.publishLeases(last.Leases) // jobs may have missed them when the old coordinator died
		}
	}
	s.publishDesired()
	s.ready.Store(true)
}
