package sdk

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// RecordSteps records n training steps at the current batch size that took
// elapsed in all. It is the per-step call: two atomic adds, no allocation,
// no I/O; a sampler turns the counters into progress events. Call it from
// one goroutine at a time (the training loop, or a binding's sampler).
//
// Steps recorded with no elapsed time (elapsed ≤ 0: a caller that could
// not time them) count toward progress but not toward the measured rate,
// which is the timed steps over their time: mixed into one sample with a
// short timed spell, they would make the rate, and with it a multi-process
// job's lookahead, as large as they are many.
func (j *Job) RecordSteps(n int64, elapsed time.Duration) {
	j.steps.Add(n)
	j.recordTime(n, elapsed)
}

// Record is RecordSteps with an exact sample count, for loops whose last
// batch of an epoch is short (samples < n × batch size).
func (j *Job) Record(steps, samples int64, elapsed time.Duration) {
	j.steps.Add(steps)
	j.recordTime(steps, elapsed)
	j.samplesAdj.Add(samples - steps*j.batch.Load())
}

func (j *Job) recordTime(n int64, elapsed time.Duration) {
	if elapsed > 0 {
		j.elapsed.Add(int64(elapsed))
	} else {
		j.untimed.Add(n)
	}
}

// StepsDone is the cumulative step count (including steps before a resume).
func (j *Job) StepsDone() int64 { return j.steps.Load() }

// BatchSize is the current batch size.
func (j *Job) BatchSize() int { return int(j.batch.Load()) }

// Done reports whether the job ran its declared length (epochs, samples
// or steps).
func (j *Job) Done() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.doneLocked()
}

func (j *Job) doneLocked() bool {
	if j.o.epochs > 0 {
		return j.ev.epoch >= j.o.epochs
	}
	return j.steps.Load() >= j.doneAt.Load()
}

// EndEpoch reports an epoch boundary: the progress up to it is sent as an
// epoch event, which is merged into a later event only when the buffer is
// full of epoch ends (eventState.coalesce). It returns the number of
// completed epochs.
func (j *Job) EndEpoch() int {
	j.syncLoop()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ev.endEpoch(j)
	j.poke()
	return j.ev.epoch
}

// Epoch is the number of completed epochs.
func (j *Job) Epoch() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ev.epoch
}

// SetBatchSize reports a batch-size change at an iteration boundary: the
// steps so far are sent at the old size, then a batch_size event with the
// job's remaining steps rescaled to n. Call it from the training loop.
func (j *Job) SetBatchSize(n int) error {
	if n < 1 || n > protocol.MaxBatchSize {
		return fmt.Errorf("sdk: job %s: SetBatchSize(%d): out of range [1, %d]", j.id, n, protocol.MaxBatchSize)
	}
	j.syncLoop()
	j.mu.Lock()
	defer j.mu.Unlock()
	if int64(n) == j.batch.Load() {
		return nil
	}
	j.ev.sample(j, false)
	j.batch.Store(int64(n))
	j.ev.rate = 0
	j.updateDoneAt()
	j.ev.push(j, protocol.EventBatchSize, 0, 0, true)
	j.poke()
	return nil
}

// updateDoneAt sets the step count at which a job measured in samples or
// steps is done, for the current batch size.
func (j *Job) updateDoneAt() {
	if j.o.epochs > 0 {
		return
	}
	j.doneAt.Store(j.steps.Load() + j.ev.remainingSteps(j))
	if m := j.loop.Load(); m != nil {
		m.refresh()
	}
}

// Checkpoint is the SDK's part of a training checkpoint: save it with the
// model (it is JSON-ready) and pass it to WithResume after a restart.
type Checkpoint struct {
	StepsDone      int64 `json:"steps_done"`
	Epoch          int   `json:"epoch"`
	BatchSize      int   `json:"batch_size"`
	SamplesInEpoch int64 `json:"samples_in_epoch"`
	SamplesDone    int64 `json:"samples_done"`
}

// Checkpoint returns the progress to save with a checkpoint.
func (j *Job) Checkpoint() Checkpoint {
	j.syncLoop()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ev.sample(j, false)
	return Checkpoint{StepsDone: j.steps.Load(), Epoch: j.ev.epoch, BatchSize: int(j.batch.Load()),
		SamplesInEpoch: j.ev.samplesInEpoch, SamplesDone: j.ev.samplesDone}
}

// Stats is a snapshot of the job's progress and transport.
type Stats struct {
	StepsDone        int64
	TotalSteps       int64 // at the current batch size
	Epoch            int
	BatchSize        int
	StepsPerSecond   float64 // smoothed over recent progress events
	SamplesPerSecond float64
	Seq              uint64 // last event sequence number assigned
	Buffered         int    // events not yet delivered
	Coalesced        int64  // progress events merged while the buffer was full
	BadLeases        int64  // lease and rank messages ignored as malformed or foreign
	Suspensions      int64  // suspensions the iterator went through
	Connected        bool
}

// Stats returns a snapshot of the job's counters.
func (j *Job) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	bs := int(j.batch.Load())
	return Stats{StepsDone: j.steps.Load(), TotalSteps: j.steps.Load() + j.ev.remainingSteps(j), Epoch: j.ev.epoch,
		BatchSize: bs, StepsPerSecond: j.ev.rate, SamplesPerSecond: j.ev.rate * float64(bs), Seq: j.ev.seq,
		Buffered: len(j.ev.queue), Coalesced: j.ev.coalesced, BadLeases: j.badLeases, Suspensions: j.suspensions,
		Connected: j.connected()}
}

// Buffered is the number of events not yet delivered.
func (j *Job) Buffered() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.ev.queue)
}

// queued is an event waiting for delivery; boundary events (epoch,
// batch size, done) are coalesced only as eventState.push and coalesce
// say, and done never.
type queued struct {
	ev       protocol.Event
	boundary bool
}

// eventState turns the counters into events; guarded by Job.mu.
type eventState struct {
	o     *options
	seq   uint64
	epoch int
	// Counters at the last event.
	lastSteps, lastElapsed, lastAdj int64
	lastUntimed                     int64
	samplesInEpoch, samplesDone     int64
	rate                            float64 // smoothed steps per second
	lastPush                        time.Time
	queue                           []queued
	// inflight is the highest seq published and not yet confirmed (0:
	// none); sentAt when the oldest of them was published; confirmNow
	// asks the next flush for a confirmation (Job.Flush).
	inflight   uint64
	sentAt     time.Time
	confirmNow bool
	coalesced  int64
	pace       pace
}

func (e *eventState) init(o *options) {
	e.o = o
	e.queue = make([]queued, 0, 64)
	e.lastPush = time.Now()
}

func (e *eventState) restore(c Checkpoint) {
	e.epoch, e.samplesInEpoch, e.samplesDone = c.Epoch, c.SamplesInEpoch, c.SamplesDone
	e.lastSteps = c.StepsDone
}

// resync continues the sequence after the coordinator's last accepted
// event, and drops buffered events it already has.
func (e *eventState) resync(lastSeq uint64) {
	e.seq = max(e.seq, lastSeq)
	n := 0
	for n < len(e.queue) && e.queue[n].ev.Seq <= lastSeq {
		n++
	}
	e.queue = append(e.queue[:0], e.queue[n:]...)
}

func (e *eventState) empty() bool { return len(e.queue) == 0 }

// take folds the counters since the last event into the cumulative state
// and returns the deltas.
func (e *eventState) take(j *Job) (steps int64, elapsed float64) {
	s, ns, adj, un := j.steps.Load(), j.elapsed.Load(), j.samplesAdj.Load(), j.untimed.Load()
	steps, dns := s-e.lastSteps, ns-e.lastElapsed
	timed := steps - (un - e.lastUntimed)
	samples := steps*j.batch.Load() + adj - e.lastAdj
	e.lastSteps, e.lastElapsed, e.lastAdj, e.lastUntimed = s, ns, adj, un
	e.samplesInEpoch += samples
	e.samplesDone += samples
	elapsed = float64(dns) / 1e9
	if timed > 0 && elapsed > 0 {
		r := float64(timed) / elapsed
		if e.rate == 0 {
			e.rate = r
		} else {
			e.rate += 0.3 * (r - e.rate)
		}
	}
	return steps, elapsed
}

// sample emits a progress event when the counters moved, or a heartbeat
// when heartbeat is set.
func (e *eventState) sample(j *Job, heartbeat bool) {
	steps, elapsed := e.take(j)
	if steps == 0 && elapsed == 0 && !heartbeat {
		return
	}
	e.push(j, protocol.EventProgress, steps, elapsed, false)
}

func (e *eventState) endEpoch(j *Job) {
	steps, elapsed := e.take(j)
	e.epoch++
	e.samplesInEpoch = 0
	j.updateDoneAt()
	e.push(j, protocol.EventProgress, steps, elapsed, true)
}

func (e *eventState) done(j *Job) {
	e.push(j, protocol.EventDone, 0, 0, true)
}

// push appends an event, coalescing the oldest progress samples when the
// buffer is full.
func (e *eventState) push(j *Job, typ protocol.EventType, steps int64, elapsed float64, boundary bool) {
	if j.rk != nil && j.rk.rank > 0 {
		return // rank 0 reports the job's progress
	}
	if j.finished {
		return // done was the last event: the coordinator ends the job on it
	}
	e.seq++
	ev := protocol.Event{V: protocol.Version, Type: typ, Job: j.id, Seq: e.seq, Steps: steps, Elapsed: elapsed,
		StepsDone: j.steps.Load(), TotalSteps: max(1, j.steps.Load()+e.remainingSteps(j)),
		Epoch: min(e.epoch, protocol.MaxEpochs), BatchSize: int(j.batch.Load())}
	if typ == protocol.EventProgress {
		ev.Throughput = min(e.rate, protocol.MaxThroughput)
	}
	if typ == protocol.EventBatchSize && len(e.queue) > 0 {
		// A batch-size change right after another, with no step between
		// them, supersedes it: the earlier size held for no step.
		if last := &e.queue[len(e.queue)-1]; last.ev.Type == protocol.EventBatchSize && last.ev.Seq > e.inflight {
			last.ev = ev
			e.coalesced++
			e.lastPush = time.Now()
			return
		}
	}
	if e.full() {
		e.coalesce()
	}
	e.queue = append(e.queue, queued{ev: ev, boundary: boundary})
	e.lastPush = time.Now()
}

// full says whether a push coalesces: when the buffer is full, or when
// more events wait for publication than the job's event budget lets out
// within about a second, so that what waits for the budget is never much
// older than that. (Published events that wait for their confirmation do
// not count against the budget.)
func (e *eventState) full() bool {
	if len(e.queue) >= e.o.buffer {
		return true
	}
	if e.pace.events.at.IsZero() {
		return false
	}
	published, _ := slices.BinarySearchFunc(e.queue, e.inflight+1, func(q queued, seq uint64) int { return cmp.Compare(q.ev.Seq, seq) })
	return len(e.queue)-published >= max(0, int(e.pace.events.tokens))+paceRate
}

// coalesce merges the oldest pair of adjacent progress samples (of one
// epoch and batch size, not being published) into the later one, which
// keeps its sequence number and the cumulative fields. With no such pair,
// it drops the oldest batch-size change that held only one progress
// sample before the next change (progress, change, progress, change: a
// size changed faster than the samples), merging the progress before it
// into the one after, which carries the size it ran at. Only when neither
// exists does it do the same across epoch ends (a job that ends epochs
// faster than it may send them): the later event's counters say where the
// job is, and the coordinator keeps no more of an epoch end than that, so
// the buffer stays bounded whatever the job does.
func (e *eventState) coalesce() {
	if !e.merge(true) {
		e.merge(false)
	}
}

// merge does one of coalesce's merges; strict keeps epoch ends apart.
func (e *eventState) merge(strict bool) bool {
	q := e.queue
	progress := func(x *queued) bool {
		return x.ev.Type == protocol.EventProgress && (!strict || !x.boundary)
	}
	for i := 0; i+1 < len(q); i++ {
		a, b := &q[i], &q[i+1]
		if a.ev.Seq <= e.inflight || !progress(a) || !progress(b) || strict && (a.ev.Epoch != b.ev.Epoch || a.ev.BatchSize != b.ev.BatchSize) {
			continue
		}
		b.ev.Steps += a.ev.Steps
		b.ev.Elapsed += a.ev.Elapsed
		e.queue = append(q[:i], q[i+1:]...)
		e.coalesced++
		return true
	}
	for i := 0; i+3 < len(q); i++ {
		a, c, b, next := &q[i], &q[i+1], &q[i+2], &q[i+3]
		if a.ev.Seq <= e.inflight || !progress(a) || !progress(b) || c.ev.Type != protocol.EventBatchSize ||
			next.ev.Type != protocol.EventBatchSize || strict && a.ev.Epoch != b.ev.Epoch {
			continue
		}
		b.ev.Steps += a.ev.Steps
		b.ev.Elapsed += a.ev.Elapsed
		e.queue = append(q[:i], q[i+2:]...)
		e.coalesced += 2
		return true
	}
	return false
}

// remainingSteps is the steps the job still needs at the current batch
// size: epoch-aware (ceil(D/B) steps per epoch) for jobs measured in
// epochs, else by remaining samples.
func (e *eventState) remainingSteps(j *Job) int64 {
	bs := j.batch.Load()
	if e.o.epochs > 0 {
		left := e.o.epochs - e.epoch
		if left <= 0 {
			return 0
		}
		d := int64(e.o.dataset)
		return int64(left-1)*ceilDiv(d, bs) + ceilDiv(max(0, d-e.samplesInEpoch), bs)
	}
	left := e.o.totalSamples() - e.samplesDone - (j.steps.Load()-e.lastSteps)*bs
	if left <= 0 {
		return 0
	}
	return min(ceilDiv(left, bs), protocol.MaxSteps)
}

// maxBatchEvents bounds the events of one published batch.
const maxBatchEvents = 256

// sender is the job's background goroutine: it samples the counters,
// re-registers after a reconnection and publishes the buffered events.
func (j *Job) sender() {
	every := j.sampleInterval()
	heartbeat := max(every, j.RoundLength()/2)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-j.quit:
			return
		case <-t.C:
			j.mu.Lock()
			j.ev.sample(j, time.Since(j.ev.lastPush) >= heartbeat)
			j.mu.Unlock()
		case <-j.kick:
		case <-j.reconnect:
			j.mu.Lock()
			j.reregister = true
			j.ev.inflight = 0 // publish the unconfirmed events again
			j.mu.Unlock()
		}
		j.rejoin()
		j.flush()
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func (j *Job) sampleInterval() time.Duration {
	if j.o.sampleEvery > 0 {
		return j.o.sampleEvery
	}
	return min(max(j.RoundLength()/4, 10*time.Millisecond), time.Second)
}

// rejoin registers again after a reconnection: the reply carries the
// current lease (missed while away) and the last sequence number the
// coordinator holds.
func (j *Job) rejoin() {
	j.mu.Lock()
	due := j.reregister && !j.finished
	j.mu.Unlock()
	if !due || !j.connected() {
		return
	}
	ctx, cancel := contextWithTimeout(j.o.requestTimeout)
	defer cancel()
	rep, err := j.registerOnce(ctx, j.registration(), false)
	if err != nil {
		j.setErr(err)
		j.log.Warn("re-registration failed; retrying", "err", err)
		return
	}
	j.mu.Lock()
	j.reregister = false
	j.mu.Unlock()
	j.adopt(rep, false)
}

// flush publishes the buffered events not yet published, in batches,
// while connected. Published events stay buffered until a flush round
// trip confirms that the server has them: when Flush asks, once the
// oldest of them is confirmEvery old, or once a quarter of the buffer
// waits, so that a job reporting every second does not cost the server a
// round trip (a write into its connection) a second: at 10,000 jobs those
// cost the server more than a round's leases (docs/scale.md). A
// confirmation only bounds the buffer: after a reconnection the job
// registers again and drops what the coordinator's reply says it holds,
// then publishes the rest again, as after a failed confirmation (the
// coordinator drops duplicates by sequence number).
func (j *Job) flush() {
	defer func() {
		j.mu.Lock()
		close(j.flushed)
		j.flushed = make(chan struct{})
		j.mu.Unlock()
	}()
	confirmEvery := j.confirmEvery() // before j.mu: RoundLength takes it
	for j.connected() {
		j.mu.Lock()
		start := 0
		for start < len(j.ev.queue) && j.ev.queue[start].ev.Seq <= j.ev.inflight {
			start++
		}
		n := min(len(j.ev.queue)-start, maxBatchEvents)
		if n == 0 {
			due := j.ev.inflight > 0 && (j.ev.confirmNow || time.Since(j.ev.sentAt) >= confirmEvery || start >= j.o.buffer/4)
			last := j.ev.inflight
			j.ev.confirmNow = false
			j.mu.Unlock()
			if due {
				j.confirm(last)
			}
			return
		}
		k, wait := j.ev.pace.allow(time.Now(), n, j.up != nil)
		if k == 0 {
			j.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-j.quit:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		n = k
		j.ev.pace.spend(n, j.up != nil)
		b := protocol.Batch{V: protocol.Version, Job: j.id, Events: make([]protocol.Event, n)}
		for i := range n {
			b.Events[i] = j.ev.queue[start+i].ev
		}
		if j.ev.inflight == 0 {
			j.ev.sentAt = time.Now()
		}
		j.ev.inflight = b.Events[n-1].Seq
		j.mu.Unlock()
		if err := j.publish(&b); err != nil {
			j.mu.Lock()
			j.ev.pace.spend(-n, j.up != nil)
			j.lastErr, j.ev.inflight = err, 0
			j.mu.Unlock()
			return
		}
	}
}

// confirm waits for a flush round trip, then drops the events published up
// to last; on failure they are published again. After Finish the
// coordinator itself confirms them (confirmByCoordinator).
func (j *Job) confirm(last uint64) {
	var err error
	if j.up != nil {
		err = j.uplinkFlush()
	} else {
		err = j.nc.FlushTimeout(j.o.requestTimeout)
	}
	j.mu.Lock()
	if err != nil {
		j.lastErr = fmt.Errorf("publishing events: no acknowledgement from the server: %w", err)
		j.ev.inflight = 0
		j.mu.Unlock()
		return
	}
	if j.finished {
		j.mu.Unlock()
		j.confirmByCoordinator()
		return
	}
	defer j.mu.Unlock()
	j.ev.resync(last)
	if j.ev.inflight == last {
		j.ev.inflight = 0
	}
}

// confirmByCoordinator confirms the events of a finished job with the
// coordinator, not the server. The server having a batch does not mean
// the coordinator folds it: the log's stream drops what arrives while its
// ingest queue is full, and the fold rejects what exceeds a job's event
// budget, so another job flooding either could make a done event vanish,
// and nothing later would repair it (progress repairs itself: every event
// carries the cumulative counters). So the job registers again: a reply
// that the job has ended confirms everything; otherwise its LastSeq drops
// what the coordinator holds, and the rest is published again after a
// pause that doubles up to finishRetryMax.
func (j *Job) confirmByCoordinator() {
	ctx, cancel := contextWithTimeout(j.o.requestTimeout)
	rep, err := j.registerOnce(ctx, j.registration(), false)
	cancel()
	var perr *protocol.Error
	j.mu.Lock()
	switch {
	case errors.As(err, &perr) && perr.Code == protocol.CodeEnded:
		j.ev.queue, j.ev.inflight, j.finishRetry = j.ev.queue[:0], 0, 0
		j.mu.Unlock()
		return
	case err != nil:
		j.lastErr = err
	default:
		j.ev.resync(rep.LastSeq)
	}
	j.ev.inflight = 0 // publish the rest again
	j.finishRetry = min(max(2*j.finishRetry, finishRetryMin), finishRetryMax)
	wait := j.finishRetry
	j.mu.Unlock()
	j.log.Debug("the coordinator has not folded the job's last events; sending them again", "wait", wait, "err", err)
	select {
	case <-time.After(wait):
	case <-j.quit:
	}
}

// The pauses between a finished job's attempts to have its last events
// folded.
const (
	finishRetryMin = 100 * time.Millisecond
	finishRetryMax = 2 * time.Second
)

// confirmEvery is how long published events may wait for a confirmation
// Flush did not ask for: 30 sampling intervals (30 s by default).
func (j *Job) confirmEvery() time.Duration { return 30 * j.sampleInterval() }

func (j *Job) publish(b *protocol.Batch) error {
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if j.up != nil {
		if err := j.up.send(protocol.UplinkEvents, 0, data, j.o.requestTimeout); err != nil {
			return fmt.Errorf("sending events to the agent: %w", err)
		}
		return nil
	}
	if err := j.nc.Publish(j.subj.Events(j.id), data); err != nil {
		return fmt.Errorf("publishing events: %w", err)
	}
	return nil
}
