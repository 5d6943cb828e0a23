package sdk

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// followerGateLocked is the slow path of a rank other than 0 at boundary b:
// below the release it continues; at the stop step it stops; at the
// release horizon it waits for rank 0 to release more steps, for as long
// as rank 0 keeps sending heartbeats (so a rank that missed a message
// blocks instead of running past a stop it did not hear of).
//
// When ctx ends while it waits it returns Stop without changing the
// agreement; the caller must not train (Steps ends with ctx's error).
func (j *Job) followerGateLocked(ctx context.Context, b int64) Directive {
	r := j.rk
	for {
		switch {
		case r.lost != nil && !(r.running && r.stop == protocol.StopAbort && b < r.stopAt):
			if r.running {
				r.running = false
				j.setStateLocked(Waiting, r.lost.Error())
			}
			return Stop
		case !r.running:
			return j.leaseDirective()
		case r.stopAt >= 0 && b >= r.stopAt:
			return j.stopHereLocked(b)
		case r.stopAt >= 0:
			j.gateAt.Store(r.stopAt)
			return Continue
		case r.finished:
			j.gateAt.Store(math.MaxInt64)
			return Continue
		case b < r.release:
			j.gateAt.Store(r.release)
			return Continue
		case LeaseState(j.state.Load()) == Closed:
			return Stop
		}
		wait := j.o.rankTimeout - time.Since(r.leaderSeen)
		if wait <= 0 {
			j.abortLocked(fmt.Sprintf("rank 0 was silent for %v while rank %d waited at step %d for it to release more steps",
				time.Since(r.leaderSeen).Round(time.Millisecond), r.rank, b))
			continue
		}
		ch := r.moved
		j.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		case <-j.quit:
		case <-ctx.Done():
			t.Stop()
			j.mu.Lock()
			return Stop
		}
		t.Stop()
		j.mu.Lock()
	}
}

// onControl is the handler of rank 0's messages on the other ranks.
func (j *Job) onControl(m *protocol.RankMessage) {
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.rk
	if r.lost != nil {
		return
	}
	if (r.leaderProc != 0 && m.Proc != r.leaderProc) || (r.session != 0 && m.Session != r.session) {
		j.abortLocked(fmt.Sprintf("rank 0 changed (process %x, was %x): it restarted, or two processes claim rank 0", m.Proc, r.leaderProc))
		return
	}
	r.leaderProc, r.session, r.leaderSeen = m.Proc, m.Session, time.Now()
	if m.Gen < r.gen {
		return
	}
	if m.Finished && !r.finished {
		r.finished = true
		j.gateAt.Store(math.MaxInt64)
	}
	switch {
	case m.Stop == protocol.StopAbort && !(r.running && m.Gen == r.gen):
		j.abortLocked("rank 0 aborted: " + m.Reason)
		return
	case r.running && m.Gen == r.gen:
		if m.Lease != nil {
			j.lease, j.hasLease, r.runLease = *m.Lease, true, *m.Lease
		}
		r.release = max(r.release, m.Release)
		stopAt, stop := r.stopAt, r.stop
		if m.StopAt >= 0 && (r.stopAt < 0 || m.Stop == protocol.StopAbort) {
			r.stopAt, r.stop, r.reason = m.StopAt, m.Stop, m.Reason
		}
		if m.Stop == protocol.StopAbort && r.lost == nil {
			r.lost = j.jobErr(ErrRankLost, "rank 0 aborted: %s", m.Reason)
		}
		j.followerGateAtLocked()
		if r.stopAt == stopAt && r.stop == stop {
			// More steps released (or the lease extended): a rank waiting
			// at the release horizon goes on; rank 0 needs no answer.
			j.wakeRankWaitersLocked()
			return
		}
	case r.running:
		// A newer generation starts where the current one stops: the
		// current one stops at its base first (every rank runs the hooks).
		if r.stopAt < 0 {
			if m.Base > r.release {
				j.abortLocked(fmt.Sprintf("generation %d starts at step %d, past the release %d of generation %d", m.Gen, m.Base, r.release, r.gen))
				return
			}
			r.stopAt, r.stop = m.Base, protocol.StopSuspend
		}
		r.next = m
		j.followerGateAtLocked()
	case m.Gen > r.gen && !r.final:
		j.followLocked(m)
		return
	case m.Stop == protocol.StopEnd && !r.final:
		r.final, r.stop = true, protocol.StopEnd
		j.setStateLocked(Ended, "ended by the coordinator: "+m.Reason)
	default:
		return
	}
	j.rankChangedLocked()
}

// followLocked joins generation m of rank 0 while this rank waits.
func (j *Job) followLocked(m *protocol.RankMessage) {
	r := j.rk
	if r.gen == 0 {
		c := m.Resume
		if c == nil {
			j.abortLocked(fmt.Sprintf("generation %d carries no progress to join at", m.Gen))
			return
		}
		j.steps.Store(c.StepsDone)
		j.batch.Store(int64(c.BatchSize))
		j.ev.restore(Checkpoint{StepsDone: c.StepsDone, Epoch: c.Epoch, BatchSize: c.BatchSize,
			SamplesInEpoch: c.SamplesInEpoch, SamplesDone: c.SamplesDone})
		j.updateDoneAt()
	} else if s := j.steps.Load(); s != m.Base {
		j.abortLocked(fmt.Sprintf("rank %d stopped at step %d but generation %d starts at step %d", r.rank, s, m.Gen, m.Base))
		return
	}
	r.gen, r.running, r.parked, r.base, r.release = m.Gen, true, false, m.Base, m.Release
	r.stopAt, r.stop, r.reason = m.StopAt, m.Stop, m.Reason
	if m.Lease != nil {
		j.lease, j.hasLease, r.runLease = *m.Lease, true, *m.Lease
	}
	j.followerGateAtLocked()
	j.setStateLocked(Running, "")
	j.rankChangedLocked()
}

// followerGateAtLocked sets the boundary of the next slow path.
func (j *Job) followerGateAtLocked() {
	r := j.rk
	switch {
	case r.stopAt >= 0:
		j.gateAt.Store(r.stopAt)
	case r.finished:
		j.gateAt.Store(math.MaxInt64)
	default:
		j.gateAt.Store(r.release)
	}
}

// followerCheckLocked runs on the heartbeat of a rank other than 0: rank 0
// must have appeared within the join timeout and stay audible.
func (j *Job) followerCheckLocked(now time.Time) {
	r := j.rk
	switch {
	case r.lost != nil || r.finished || j.finished || r.final:
	case r.leaderProc == 0 && now.Sub(r.started) > j.o.rankJoin:
		j.abortLocked(fmt.Sprintf("rank 0 did not appear within %v", j.o.rankJoin))
	case r.leaderProc != 0 && now.Sub(r.leaderSeen) > j.o.rankTimeout:
		j.abortLocked(fmt.Sprintf("rank 0 was silent for %v", now.Sub(r.leaderSeen).Round(time.Millisecond)))
	}
}
