package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// ranks is the rank agreement of a multi-process job (the package doc,
// "Multi-process jobs", describes it). All fields are guarded by Job.mu;
// the loop's fast path reads only Job.gateAt.
type ranks struct {
	rank, world int
	proc        uint64 // this process, random
	started     time.Time
	sub         *nats.Subscription
	kick        chan struct{} // publish the state now
	moved       chan struct{} // closed and replaced at every change of the agreement

	session       uint64 // rank 0's session (rank 0: its own)
	gen           uint64 // the generation this rank follows (0: none yet)
	running       bool   // this rank trains in generation gen (until stopAt)
	base, release int64
	stopAt        int64 // boundary at which generation gen stops; -1: none
	stop          protocol.RankStop
	reason        string
	lost          error // the agreement broke: every wait returns it
	parked        bool  // the loop waits for RUN (its hooks are done)
	finished      bool  // rank 0 finished the job's work

	// Rank 0.
	want     bool              // a valid RUN lease is held
	wantStop protocol.RankStop // why not, when the lease was withdrawn
	final    bool              // preempted, ended or aborted: no new generation in this process
	runLease protocol.Lease    // the RUN lease of the running generation
	peers    []peer            // by rank; peers[0] unused

	// Other ranks.
	leaderProc uint64
	leaderSeen time.Time
	next       *protocol.RankMessage // a generation that starts where the current one stops
}

type peer struct {
	proc, session, gen uint64
	step               int64
	running            bool
	seen               time.Time
	left               string // "closed" or "finished" when the rank said so
}

// ErrRankLost ends every rank's loop when the agreement broke: a rank went
// silent, closed, restarted or disagreed. The process should exit non-zero;
// the launcher restarts every rank from the job's checkpoint.
var ErrRankLost = fmt.Errorf("sdk: a rank of the job was lost; exit and restart every rank from the checkpoint")

func newRanks(o *options) *ranks {
	r := &ranks{rank: o.rank, world: o.world, proc: nonzeroRand(), started: time.Now(), stopAt: -1,
		kick: make(chan struct{}, 1), moved: make(chan struct{})}
	if r.rank == 0 {
		r.session = nonzeroRand()
		r.peers = make([]peer, r.world)
	}
	return r
}

func nonzeroRand() uint64 {
	for {
		if v := rand.Uint64(); v != 0 {
			return v
		}
	}
}

// Rank is this process's rank (0 for a single-process job).
func (j *Job) Rank() int { return j.o.rank }

// WorldSize is the number of processes of the job (1 unless multi-rank).
func (j *Job) WorldSize() int { return j.o.world }

// LocalRank is this process's index among the job's ranks on its node.
func (j *Job) LocalRank() int { return j.o.localRank }

// Node is the node a resident process registered (WithNode), or "".
func (j *Job) Node() string { return j.o.node }

// Devices is the current grant, per node, while the job (this rank) holds
// a RUN lease; nil otherwise. A coordinator that names no nodes grants
// cluster-wide ids only: they are returned as one node with an empty name.
func (j *Job) Devices() []protocol.NodeDevices {
	l, ok := j.Grant()
	if !ok {
		return nil
	}
	return LeaseDevices(l)
}

// Grant is the RUN lease this process trains under while it holds one
// (for a multi-process job: the lease of the running generation, which
// every rank shares), and false otherwise.
func (j *Job) Grant() (protocol.Lease, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state.Load() != int32(Running) {
		return protocol.Lease{}, false
	}
	if j.rk != nil {
		return cloneLease(j.rk.runLease), true
	}
	return cloneLease(j.lease), j.lease.Action == protocol.Run
}

// LeaseDevices is the grant of a RUN lease per node (see Job.Devices).
func LeaseDevices(l protocol.Lease) []protocol.NodeDevices {
	if l.Action != protocol.Run {
		return nil
	}
	if len(l.Devices) == 0 {
		if len(l.Workers) == 0 {
			return nil
		}
		return []protocol.NodeDevices{{Devices: append([]int(nil), l.Workers...)}}
	}
	out := make([]protocol.NodeDevices, len(l.Devices))
	for i, d := range l.Devices {
		out[i] = protocol.NodeDevices{Node: d.Node, Devices: append([]int(nil), d.Devices...)}
	}
	return out
}

// ---- rank 0 ---------------------------------------------------------------

// leaderLeaseLocked replaces setStateLocked for rank 0 of a multi-rank job:
// the lease says what the job should do; the ranks do it at an agreed step.
func (j *Job) leaderLeaseLocked(s LeaseState, reason string) {
	r := j.rk
	j.reason = reason
	switch s {
	case Running:
		r.want, r.wantStop = true, ""
	case Waiting:
		r.want, r.wantStop = false, protocol.StopSuspend
		if j.o.exitMode {
			r.wantStop = protocol.StopPreempt
		}
	default:
		r.want, r.wantStop = false, protocol.StopEnd
	}
	j.leaderStepLocked()
}

// leaderStepLocked moves rank 0's agreement toward what the lease wants.
func (j *Job) leaderStepLocked() {
	r := j.rk
	switch {
	case r.lost != nil:
		return
	case r.running && !r.want && r.stopAt < 0:
		r.stopAt, r.stop, r.reason = r.release, r.wantStop, j.reason
		j.gateAt.Store(r.stopAt)
		j.rankChangedLocked()
	case r.running:
		if r.want && j.lease.Action == protocol.Run {
			r.runLease = j.lease // an extension: the ranks see the new lease
		}
		j.rankChangedLocked()
	case r.final:
	case !r.want && r.wantStop == protocol.StopEnd:
		r.final, r.stop, r.reason = true, protocol.StopEnd, j.reason
		j.setStateLocked(Ended, j.reason)
		j.rankChangedLocked()
	case r.want && r.parked && j.state.Load() == int32(Waiting) && j.peersReadyLocked():
		j.startGenLocked()
	}
}

// peersReadyLocked reports whether every other rank waits at rank 0's step
// in rank 0's current generation (or, before the first, has joined).
func (j *Job) peersReadyLocked() bool {
	r := j.rk
	step := j.steps.Load()
	for i := 1; i < r.world; i++ {
		p := &r.peers[i]
		if p.proc == 0 || p.running || p.left != "" { // running: not parked yet
			return false
		}
		if r.gen == 0 && p.session == 0 {
			continue
		}
		if p.session != r.session || p.gen != r.gen || p.step != step {
			return false
		}
	}
	return true
}

// startGenLocked starts the next generation at rank 0's current step.
func (j *Job) startGenLocked() {
	r := j.rk
	r.gen++
	r.running, r.parked = true, false
	r.base = j.steps.Load()
	r.runLease = j.lease
	j.ev.sample(j, false)
	j.genStart = Checkpoint{StepsDone: r.base, Epoch: j.ev.epoch, BatchSize: int(j.batch.Load()),
		SamplesInEpoch: j.ev.samplesInEpoch, SamplesDone: j.ev.samplesDone}
	look := j.lookaheadLocked()
	r.release, r.stopAt, r.stop, r.reason = r.base+look, -1, "", ""
	j.gateAt.Store(r.base + (look+1)/2)
	j.setStateLocked(Running, "")
	j.rankChangedLocked()
}

// lookaheadLocked is how many steps rank 0 releases ahead: the lookahead
// time at the measured rate, at least 1.
func (j *Job) lookaheadLocked() int64 {
	n := j.ev.rate * j.o.lookahead.Seconds()
	if !(n >= 1) {
		return 1
	}
	return int64(min(n, 1<<20))
}

// leaderGateLocked is rank 0's slow path at boundary b (steps done).
func (j *Job) leaderGateLocked(b int64) Directive {
	r := j.rk
	if !r.running {
		return j.leaseDirective()
	}
	if r.stopAt >= 0 {
		if b < r.stopAt {
			j.gateAt.Store(r.stopAt)
			return Continue
		}
		return j.stopHereLocked(b)
	}
	look := j.lookaheadLocked()
	r.release = max(r.release, b+look)
	j.gateAt.Store(b + (look+1)/2)
	select {
	case r.kick <- struct{}{}: // the rank goroutine publishes the new release
	default:
	}
	return Continue
}

// onRankStatus is rank 0's handler of the other ranks' messages.
func (j *Job) onRankStatus(m *protocol.RankMessage) {
	r := j.rk
	j.mu.Lock()
	defer j.mu.Unlock()
	if m.Rank == 0 {
		if m.Proc != r.proc {
			j.abortLocked(fmt.Sprintf("another process (%x) claims rank 0 of job %s", m.Proc, j.id))
		}
		return
	}
	p := &r.peers[m.Rank]
	switch {
	case p.proc != 0 && p.proc != m.Proc && p.left == "":
		j.abortLocked(fmt.Sprintf("two processes claim rank %d (a rank restarted alone, or a launcher bug)", m.Rank))
		return
	case m.Session != 0 && m.Session != r.session:
		return // a rank of an earlier rank 0; it will notice and exit
	case m.Session == 0 && r.gen > 0 && p.proc != m.Proc:
		j.abortLocked(fmt.Sprintf("rank %d joined after the job started (it restarted alone)", m.Rank))
		return
	}
	*p = peer{proc: m.Proc, session: m.Session, gen: m.Gen, step: m.Step, running: m.Running, seen: time.Now(), left: m.Reason}
	if m.Reason == "closed" && !r.finished && !r.final && !stoppedAsAgreed(r, m) {
		j.abortLocked(fmt.Sprintf("rank %d closed before the job finished", m.Rank))
		return
	}
	// While a generation runs, a rank's status changes nothing rank 0
	// announces (a stop comes from a lease, and the heartbeat repeats the
	// state for a rank that missed it); between generations it may
	// complete the set of parked ranks that starts the next one.
	if !r.running {
		j.leaderStepLocked()
	}
}

// stoppedAsAgreed reports whether a rank that closed did so at the stop
// rank 0 announced for a preemption or the job's end, after which every
// rank's process exits: a rank that gets there first (rank 0 is slower, or
// busy) closes before rank 0 has stopped itself, and that is no loss. (Such
// a rank reports itself running: it exits instead of parking.)
func stoppedAsAgreed(r *ranks, m *protocol.RankMessage) bool {
	return r.stopAt >= 0 && m.Gen == r.gen && m.Step == r.stopAt &&
		(r.stop == protocol.StopPreempt || r.stop == protocol.StopEnd)
}

// leaderCheckLocked runs on rank 0's heartbeat: a silent rank is lost.
func (j *Job) leaderCheckLocked(now time.Time) {
	r := j.rk
	if r.lost != nil || r.finished {
		return
	}
	for i := 1; i < r.world; i++ {
		p := &r.peers[i]
		switch {
		case p.left != "":
		case p.proc == 0 && now.Sub(r.started) > j.o.rankJoin:
			j.abortLocked(fmt.Sprintf("rank %d did not join within %v", i, j.o.rankJoin))
			return
		case p.proc != 0 && now.Sub(p.seen) > j.o.rankTimeout:
			j.abortLocked(fmt.Sprintf("rank %d was silent for %v", i, now.Sub(p.seen).Round(time.Millisecond)))
			return
		}
	}
}

// abortLocked breaks the agreement: the running generation stops at its
// release (every rank can reach it) and every rank ends with ErrRankLost.
func (j *Job) abortLocked(why string) {
	r := j.rk
	if r.lost != nil {
		return
	}
	j.log.Error("rank agreement broken; every rank stops", "rank", r.rank, "reason", why)
	r.lost = j.jobErr(ErrRankLost, "%s", why)
	r.final, r.reason = true, why
	if r.rank == 0 && r.running {
		if r.stopAt < 0 {
			r.stopAt = r.release
		}
		r.stop = protocol.StopAbort
		j.gateAt.Store(r.stopAt)
	} else {
		r.stop = protocol.StopAbort
		j.gateAt.Store(0) // the next boundary stops
		if !r.running {
			j.setStateLocked(Waiting, why)
		}
	}
	j.rankChangedLocked()
}

// ---- every rank -----------------------------------------------------------

// parkLocked records that the loop waits for RUN with its hooks done: rank
// 0 starts a generation only when every rank, itself included, is parked,
// so that no rank resumes while another still runs its suspend hook.
func (j *Job) parkLocked() {
	r := j.rk
	if r.parked || r.running || LeaseState(j.state.Load()) == Running {
		return
	}
	r.parked = true
	if r.rank == 0 {
		j.leaderStepLocked()
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// gate is the slow path of a boundary at or past gateAt.
func (j *Job) gate(ctx context.Context) Directive {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.rk == nil {
		return j.leaseDirective()
	}
	b := j.steps.Load()
	if j.rk.rank == 0 {
		return j.leaderGateLocked(b)
	}
	return j.followerGateLocked(ctx, b)
}

// stopHereLocked stops the running generation at its stop step b.
func (j *Job) stopHereLocked(b int64) Directive {
	r := j.rk
	if b != r.stopAt {
		j.abortLocked(fmt.Sprintf("rank %d is at step %d past the agreed stop %d", r.rank, b, r.stopAt))
	}
	r.running = false
	d := Suspend
	switch r.stop {
	case protocol.StopPreempt:
		r.final, d = true, Preempt
	case protocol.StopEnd:
		r.final, d = true, Stop
		j.setStateLocked(Ended, "ended by the coordinator: "+r.reason)
	case protocol.StopAbort:
		d = Stop
		if r.lost == nil {
			r.lost = j.jobErr(ErrRankLost, "%s", r.reason)
		}
	}
	if d != Stop || r.stop == protocol.StopAbort {
		j.setStateLocked(Waiting, fmt.Sprintf("every rank stopped at step %d: %s", b, orDefault(r.reason, string(r.stop))))
	}
	j.gateAt.Store(math.MaxInt64)
	j.rankChangedLocked()
	if r.rank == 0 {
		j.leaderStepLocked() // a RUN lease may be waiting for this stop
	} else if n := r.next; n != nil && d == Suspend {
		r.next = nil
		j.followLocked(n)
	}
	return d
}

// leaseDirective is the directive of the current state (under j.mu).
func (j *Job) leaseDirective() Directive {
	if j.rk != nil && j.rk.lost != nil {
		return Stop
	}
	switch LeaseState(j.state.Load()) {
	case Running:
		return Continue
	case Waiting:
		if j.o.exitMode || j.rk != nil && j.rk.stop == protocol.StopPreempt {
			return Preempt
		}
		return Suspend
	}
	return Stop
}

// rankChangedLocked wakes the rank goroutine (to publish) and every
// waiter on the agreement.
func (j *Job) rankChangedLocked() {
	select {
	case j.rk.kick <- struct{}{}:
	default:
	}
	j.wakeRankWaitersLocked()
}

// wakeRankWaitersLocked wakes every waiter on the agreement without
// publishing this rank's state: for changes the other ranks need not hear
// of. (Answering every message with one of its own made the ranks echo
// each other as fast as the server carried them, thousands of messages a
// second per rank, until the flood guard cut rank 0 off.)
func (j *Job) wakeRankWaitersLocked() {
	r := j.rk
	close(r.moved)
	r.moved = make(chan struct{})
	close(j.changed)
	j.changed = make(chan struct{})
}

// rankMessageLocked is this rank's current state as a message.
func (j *Job) rankMessageLocked() protocol.RankMessage {
	r := j.rk
	m := protocol.RankMessage{V: protocol.Version, Job: j.id, Rank: r.rank, World: r.world, Proc: r.proc,
		Session: r.session, Gen: r.gen, Step: j.steps.Load(), Running: r.running || (r.rank > 0 && !r.parked), StopAt: -1}
	if r.rank != 0 {
		if j.finished {
			m.Reason = "finished"
		} else if LeaseState(j.state.Load()) == Closed {
			m.Reason = "closed"
		}
		return m
	}
	m.Base, m.Release, m.StopAt, m.Stop, m.Reason, m.Finished = r.base, r.release, r.stopAt, r.stop, r.reason, r.finished
	if m.Stop != "" && m.StopAt < 0 {
		m.StopAt = m.Release // an end or abort outside a generation
	}
	m.Reason = truncate(m.Reason, protocol.MaxRankReasonLen)
	if r.gen > 0 {
		l := cloneLease(r.runLease)
		m.Lease = &l
	}
	if r.gen > 0 {
		m.Resume = &protocol.RankCheckpoint{StepsDone: r.base, Epoch: j.genStart.Epoch, BatchSize: j.genStart.BatchSize,
			SamplesInEpoch: j.genStart.SamplesInEpoch, SamplesDone: j.genStart.SamplesDone}
	}
	return m
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// publishRank publishes this rank's state on the ranks subject.
func (j *Job) publishRank() {
	j.mu.Lock()
	m := j.rankMessageLocked()
	j.mu.Unlock()
	data, err := json.Marshal(&m)
	if err != nil {
		j.log.Error("encoding a rank message", "err", err)
		return
	}
	if err := j.nc.Publish(j.subj.Ranks(j.id), data); err != nil {
		j.log.Debug("publishing the rank state", "err", err)
	}
}

// onRanks handles a message of the ranks subject.
func (j *Job) onRanks(msg *nats.Msg) {
	m, err := protocol.DecodeRankMessage(msg.Data, protocol.DefaultMaxMessageBytes)
	if err != nil {
		j.mu.Lock()
		j.badLeases++
		j.mu.Unlock()
		j.log.Warn("ignoring a bad rank message", "err", err)
		return
	}
	r := j.rk
	switch {
	case m.Job != j.id:
		return
	case m.Proc == r.proc:
		return // our own
	case m.World != r.world:
		j.mu.Lock()
		j.abortLocked(fmt.Sprintf("rank %d runs with world size %d, this rank with %d", m.Rank, m.World, r.world))
		j.mu.Unlock()
		return
	case r.rank == 0:
		j.onRankStatus(m)
	case m.Rank == 0:
		j.onControl(m)
	}
}

// rankLoop publishes this rank's state at every change and every
// heartbeat, and watches the other ranks' heartbeats.
func (j *Job) rankLoop() {
	t := time.NewTicker(j.o.rankBeat)
	defer t.Stop()
	for {
		select {
		case <-j.quit:
			return
		case <-t.C:
			j.mu.Lock()
			if j.rk.rank == 0 {
				j.leaderCheckLocked(time.Now())
			} else {
				j.followerCheckLocked(time.Now())
			}
			j.mu.Unlock()
		case <-j.rk.kick:
		}
		j.publishRank()
	}
}

// Gate is the step count (StepsDone) at which a loop that does not use
// Boundary on every step must call it even while LeaseState reads Running:
// the next check of the rank agreement (math.MaxInt64 for a
// single-process job). The C bindings mirror it into the control block.
func (j *Job) Gate() int64 { return j.gateAt.Load() }

// RankErr is the error that broke the rank agreement (it wraps
// ErrRankLost), or nil.
func (j *Job) RankErr() error {
	if j.rk == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rk.lost
}
