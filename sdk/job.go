package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Job is a registered training job. Its methods are safe for concurrent
// use; the per-step methods (RecordSteps, Record, LeaseState, Boundary) are
// lock-free, allocation-free and do no I/O.
type Job struct {
	// Hot path: written at every step, read by the sampler.
	steps      atomic.Int64          // cumulative steps, including those before a resume
	elapsed    atomic.Int64          // cumulative training time, ns
	samplesAdj atomic.Int64          // samples recorded beyond steps × batch size (Record)
	untimed    atomic.Int64          // steps recorded with no elapsed time (RecordSteps)
	batch      atomic.Int64          // current batch size
	state      atomic.Int32          // LeaseState
	doneAt     atomic.Int64          // steps at which the job's work is done (MaxInt64: by epochs)
	loop       atomic.Pointer[meter] // the running Steps loop, if any
	gateAt     atomic.Int64          // boundary (steps done) of the next rank-agreement check; MaxInt64: none
	_          [64]byte              // keep the sampler's fields off the hot cache line

	o    options
	id   string
	subj protocol.Subjects
	nc   *nats.Conn // nil with an uplink
	up   *uplink    // the agent's uplink (uplink.go); nil with a connection
	sub  *nats.Subscription
	log  *slog.Logger

	kick      chan struct{} // wake the sender
	reconnect chan struct{} // the connection came back
	quit      chan struct{}
	senderWG  sync.WaitGroup
	closeOnce sync.Once

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced at every lease-state change
	flushed     chan struct{} // closed and replaced after every flush attempt
	ev          eventState
	lease       protocol.Lease
	hasLease    bool
	leaseGen    uint64 // generation of the expiry timer
	expiry      *time.Timer
	deadline    time.Time // local expiry of the current RUN lease
	reason      string    // why the job is not running
	offset      float64   // local Unix seconds minus coordinator seconds
	haveOffset  bool
	reply       protocol.RegisterReply // the latest registration reply
	reregister  bool                   // a re-registration is due
	lastErr     error                  // the latest delivery or connection error
	finished    bool
	finishRetry time.Duration // the last pause of confirmByCoordinator
	badLeases   int64
	suspensions int64
	epoch       uint64     // the highest leader epoch seen on a lease
	rk          *ranks     // the rank agreement of a multi-process job; nil for one process
	genStart    Checkpoint // rank 0: the progress at the start of the running generation

	// The agent's lease pipe (leasefd.go): nil when not read.
	pipe     *os.File
	pipeDone chan struct{} // closed when its reader returned
	relayed  atomic.Bool   // the registration says Relayed
}

// LeaseState is the job's permission to train, as the latest lease says.
type LeaseState int32

// Lease states.
const (
	// Waiting: no valid RUN lease (not scheduled yet, suspended, or the
	// lease expired without renewal). Do not train.
	Waiting LeaseState = iota
	// Running: a valid RUN lease; train on the granted workers.
	Running
	// Ended: the coordinator ended the job (EXIT lease) or the job
	// reported done.
	Ended
	// Closed: Close was called.
	Closed
)

func (s LeaseState) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Running:
		return "running"
	case Ended:
		return "ended"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("LeaseState(%d)", int32(s))
}

// Register connects to the coordinator and registers the job, or resumes it
// when a previous process registered the same id with the same parameters.
// It retries an unreachable or busy coordinator until WithRegisterTimeout
// or ctx ends. The job is Waiting until its first RUN lease.
func Register(ctx context.Context, opts ...Option) (*Job, error) {
	var o options
	for i, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("sdk: option %d: %w", i+1, err)
		}
	}
	o.defaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	reg := o.register()
	if err := reg.Validate(); err != nil {
		return nil, fmt.Errorf("sdk: job %s: %w", o.job, err)
	}
	j := &Job{o: o, id: o.job, subj: protocol.Subjects{Prefix: o.prefix}, log: o.log.With("job", o.job),
		kick: make(chan struct{}, 1), reconnect: make(chan struct{}, 1), quit: make(chan struct{}),
		changed: make(chan struct{}), flushed: make(chan struct{}), reason: "no RUN lease yet"}
	j.ev.init(&j.o)
	j.batch.Store(int64(o.batchSize))
	j.doneAt.Store(math.MaxInt64)
	j.gateAt.Store(math.MaxInt64)
	if o.world > 1 {
		j.rk = newRanks(&j.o)
		if o.rank > 0 {
			j.reason = "waiting for rank 0 to start"
		}
	}
	pipe := j.leasePipe()
	j.relayed.Store(pipe != nil)
	if j.up = j.openUplink(pipe != nil); j.up == nil {
		j.up = j.openJobSocket(ctx)
	}
	if j.up == nil {
		if err := j.connect(); err != nil {
			j.dropPipe(pipe)
			return nil, err
		}
	}
	if j.rk != nil && o.rank > 0 {
		j.senderWG.Go(j.rankLoop)
		j.publishRank()
		return j, nil
	}
	rctx, cancel := context.WithTimeout(ctx, o.registerTimeout)
	defer cancel()
	rep, err := j.registerOnce(rctx, j.registration(), true)
	if errors.Is(err, errNoUplink) {
		if err = j.leaveUplink(); err == nil {
			rep, err = j.registerOnce(rctx, j.registration(), true)
		} else {
			j.dropPipe(pipe)
			return nil, err
		}
	}
	if err != nil {
		j.dropPipe(pipe)
		j.dropTransport()
		return nil, err
	}
	j.adopt(rep, true)
	if pipe != nil {
		j.pipe, j.pipeDone = pipe, make(chan struct{})
		go j.readLeases(pipe, j.pipeDone)
	}
	j.senderWG.Go(j.sender)
	if j.rk != nil {
		j.senderWG.Go(j.rankLoop)
	}
	return j, nil
}

// registration is the job's registration message as of now.
func (j *Job) registration() protocol.Register {
	r := j.o.register()
	r.Relayed = j.relayed.Load()
	return r
}

// dropPipe leaves the lease pipe of a Register that failed to the next.
func (j *Job) dropPipe(f *os.File) {
	if f != nil {
		releaseLeasePipe(j.o.leaseFD, false)
	}
}

// connect dials NATS and subscribes to the lease subject.
func (j *Job) connect() error {
	o := &j.o
	opts := []nats.Option{
		nats.Name("shockwave-sdk " + j.id),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1), // publish fails while disconnected: the SDK keeps the events
		nats.CustomReconnectDelay(j.backoff),
		nats.PingInterval(10 * time.Second),
		nats.ReconnectHandler(func(*nats.Conn) {
			j.log.Info("reconnected to the coordinator")
			select {
			case j.reconnect <- struct{}{}:
			default:
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // Close
			}
			j.setErr(fmt.Errorf("disconnected: %w", err))
			j.log.Warn("disconnected from the coordinator; training continues until the lease expires", "err", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			j.log.Warn("NATS error", "err", err)
		}),
	}
	if o.creds != "" {
		opts = append(opts, nats.UserCredentials(o.creds), nats.CustomInboxPrefix(j.subj.Inbox(j.id)))
	}
	if o.token != "" {
		opts = append(opts, nats.Token(o.token))
	}
	if o.tlsCA != "" {
		opts = append(opts, nats.RootCAs(o.tlsCA))
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return fmt.Errorf("%w: job %s: %s and %s go together (one of them is empty)", ErrRegister, j.id, EnvTLSCert, EnvTLSKey)
	}
	if o.tlsCert != "" {
		opts = append(opts, nats.ClientCert(o.tlsCert, o.tlsKey))
	}
	opts = append(opts, o.natsOpts...)
	nc, err := nats.Connect(o.url, opts...)
	if err != nil {
		return fmt.Errorf("%w: job %s: connecting to the coordinator's NATS at %s: %w", ErrRegister, j.id, o.url, err)
	}
	j.nc = nc
	if j.rk != nil {
		if j.rk.sub, err = nc.Subscribe(j.subj.Ranks(j.id), j.onRanks); err == nil {
			_ = j.rk.sub.SetPendingLimits(4096, 16<<20)
		}
		if err == nil && j.rk.rank > 0 {
			err = nc.Flush()
		}
		if err != nil {
			nc.Close()
			return fmt.Errorf("%w: job %s: subscribing to %s: %w", ErrRegister, j.id, j.subj.Ranks(j.id), err)
		}
		if j.rk.rank > 0 {
			return nil // rank 0 follows the leases
		}
	}
	sub, err := nc.Subscribe(j.subj.Lease(j.id), j.onLease)
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return fmt.Errorf("%w: job %s: subscribing to %s: %w", ErrRegister, j.id, j.subj.Lease(j.id), err)
	}
	_ = sub.SetPendingLimits(1024, 16<<20)
	j.sub = sub
	return nil
}

// backoff is the reconnection delay: doubling from the first wait up to
// the maximum, with ±20 % jitter.
func (j *Job) backoff(attempts int) time.Duration {
	d := j.o.reconnectWait << min(attempts, 20)
	if d > j.o.reconnectWaitMax || d <= 0 {
		d = j.o.reconnectWaitMax
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// registerOnce sends the registration; with retry it retries the answers
// that mean "try again" (no coordinator listening, a timeout, unavailable)
// until ctx ends.
func (j *Job) registerOnce(ctx context.Context, reg protocol.Register, retry bool) (*protocol.RegisterReply, error) {
	data, err := json.Marshal(reg)
	if err != nil {
		return nil, fmt.Errorf("%w: job %s: %w", ErrRegister, j.id, err)
	}
	wait := 50 * time.Millisecond
	for {
		rep, err := j.request(ctx, data)
		if err == nil || !retry || !errors.Is(err, errRetry) {
			return rep, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: job %s: gave up after %v: %w", ErrRegister, j.id, j.o.registerTimeout, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

var errRetry = errors.New("retry")

func (j *Job) request(ctx context.Context, data []byte) (*protocol.RegisterReply, error) {
	rctx, cancel := context.WithTimeout(ctx, j.o.requestTimeout)
	defer cancel()
	var body []byte
	if j.up != nil {
		b, err := j.uplinkRegister(rctx, data)
		if err != nil {
			return nil, err
		}
		body = b
	} else {
		m, err := j.nc.RequestWithContext(rctx, j.subj.Register(), data)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, fmt.Errorf("%w: no coordinator listens on %s at %s (is `shockwave coordinator` running with prefix %q?): %w",
				ErrRegister, j.subj.Register(), j.o.url, j.o.prefix, errRetry)
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			return nil, fmt.Errorf("%w: the coordinator did not answer on %s: %w", ErrRegister, j.subj.Register(), errRetry)
		case err != nil:
			return nil, fmt.Errorf("%w: job %s: request on %s: %w (%w)", ErrRegister, j.id, j.subj.Register(), err, errRetry)
		}
		body = m.Data
	}
	rep, err := protocol.DecodeRegisterReply(body, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("%w: job %s: unreadable reply: %w", ErrRegister, j.id, err)
	}
	if rep.Error != nil {
		err := fmt.Errorf("%w: job %s: the coordinator refused it: %w", ErrRegister, j.id, rep.Error)
		if rep.Error.Code == protocol.CodeUnavailable {
			err = fmt.Errorf("%w (%w)", err, errRetry)
		}
		return nil, err
	}
	if rep.Job != j.id {
		return nil, fmt.Errorf("%w: job %s: the reply names job %q", ErrRegister, j.id, rep.Job)
	}
	return rep, nil
}

// adopt applies a registration reply: the clock offset, the sequence
// number to continue from, the progress of a resumed job, and the current
// lease when the job holds one.
func (j *Job) adopt(rep *protocol.RegisterReply, first bool) {
	recv := time.Now()
	j.mu.Lock()
	j.reply = *rep
	if rep.Now > 0 {
		j.offset, j.haveOffset = unixSeconds(recv)-rep.Now, true
	}
	if first {
		j.adoptProgress(rep)
	}
	j.ev.resync(rep.LastSeq)
	j.mu.Unlock()
	if rep.Lease != nil {
		j.applyLease(*rep.Lease, recv)
	}
}

// adoptProgress sets the starting progress: the checkpoint's (WithResume)
// when given, else the coordinator's record of a resumed job.
func (j *Job) adoptProgress(rep *protocol.RegisterReply) {
	var c Checkpoint
	switch {
	case j.o.resume != nil:
		c = *j.o.resume
	case rep.Resumed:
		c = Checkpoint{StepsDone: rep.StepsDone, Epoch: rep.Epoch, BatchSize: rep.BatchSize}
	default:
		j.updateDoneAt() // a fresh job measured in samples or steps
		return
	}
	if c.BatchSize <= 0 {
		c.BatchSize = j.o.batchSize
	}
	if c.SamplesDone == 0 {
		c.SamplesDone = int64(c.Epoch)*int64(j.o.dataset) + c.SamplesInEpoch
	}
	j.steps.Store(c.StepsDone)
	j.batch.Store(int64(c.BatchSize))
	j.ev.restore(c)
	j.updateDoneAt()
}

// ID is the job id.
func (j *Job) ID() string { return j.id }

// Resumed reports whether the coordinator knew the job already (a restart).
func (j *Job) Resumed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.reply.Resumed
}

// RoundLength is the coordinator's round length.
func (j *Job) RoundLength() time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return time.Duration(j.reply.RoundSeconds * float64(time.Second))
}

// Conn is the job's NATS connection (for tools; do not close it). It is
// nil when the job reaches the coordinator through its node agent's
// uplink (Uplinked), which opens no connection: a process that needs a
// connection passes WithoutUplink.
func (j *Job) Conn() *nats.Conn { return j.nc }

// Finish reports that the job completed its work: it sends the pending
// progress and a done event, and waits until the coordinator has folded
// them (it registers again to ask; see Faults in the package doc) or ctx
// ends (then the error wraps ErrNotDelivered and the last network error).
// The job is Ended afterwards; call Close to release the connection.
// Finish is idempotent.
func (j *Job) Finish(ctx context.Context) error {
	j.syncLoop()
	j.mu.Lock()
	if j.state.Load() == int32(Closed) {
		j.mu.Unlock()
		return j.jobErr(ErrClosed, "finish")
	}
	if !j.finished {
		j.ev.sample(j, false)
		j.ev.done(j)
		j.finished = true // no event after done
		j.stopExpiryLocked()
		j.setStateLocked(Ended, "finished: reported done")
		if j.rk != nil {
			if j.rk.rank == 0 {
				j.rk.finished = true
			}
			j.rankChangedLocked()
		}
	}
	j.mu.Unlock()
	if j.rk != nil {
		j.publishRank()
	}
	return j.Flush(ctx)
}

// Flush sends the counters as a progress event now and waits until every
// buffered event is delivered, or ctx ends.
func (j *Job) Flush(ctx context.Context) error {
	j.syncLoop()
	if j.rk != nil && j.rk.rank > 0 {
		return nil // rank 0 reports the job's progress
	}
	j.mu.Lock()
	j.ev.sample(j, false)
	j.mu.Unlock()
	for {
		j.mu.Lock()
		empty, ch, lastErr := j.ev.empty(), j.flushed, j.lastErr
		j.ev.confirmNow = true
		j.mu.Unlock()
		if empty {
			return nil
		}
		if j.state.Load() == int32(Closed) {
			return j.jobErr(ErrNotDelivered, "closed with %d events buffered", j.Buffered())
		}
		if j.up != nil && !j.up.open() { // it does not come back
			return j.jobErr(ErrNotDelivered, "%d events buffered: the uplink to the agent ended: %v", j.Buffered(), j.up.ended())
		}
		j.poke()
		select {
		case <-ch:
		case <-ctx.Done():
			cause := ctx.Err()
			if lastErr != nil {
				cause = fmt.Errorf("%w; last error: %w", cause, lastErr)
			}
			return j.jobErr(ErrNotDelivered, "%d events buffered: %v", j.Buffered(), cause)
		}
	}
}

// Close stops the job's goroutines, tries for a few seconds to deliver the
// buffered events, and closes the connection. It sends no done event: a job
// that closes without Finish stays registered (an EXIT-mode process that
// will be restarted, or a crash). Close is idempotent.
func (j *Job) Close() error {
	var err error
	j.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), j.o.closeFlushTimeout)
		err = j.Flush(ctx)
		cancel()
		close(j.quit)
		j.senderWG.Wait()
		j.mu.Lock()
		j.stopExpiryLocked()
		if r := j.rk; r != nil && r.rank == 0 && !r.finished && (r.running || r.lost == nil && !r.final) {
			j.abortLocked("rank 0 closed before the job finished")
		}
		j.setStateLocked(Closed, "closed")
		if j.rk != nil {
			close(j.rk.moved)
			j.rk.moved = make(chan struct{})
		}
		j.mu.Unlock()
		if j.rk != nil {
			j.publishRank()
			_ = j.nc.FlushTimeout(time.Second)
			_ = j.rk.sub.Unsubscribe()
		}
		if j.sub != nil {
			_ = j.sub.Unsubscribe()
		}
		if j.pipe != nil {
			releaseLeasePipe(j.o.leaseFD, true)
			<-j.pipeDone
		}
		if j.up != nil {
			j.up.release(true)
		} else {
			j.nc.Close()
		}
	})
	return err
}

func (j *Job) poke() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

func (j *Job) setErr(err error) {
	j.mu.Lock()
	j.lastErr = err
	j.mu.Unlock()
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
