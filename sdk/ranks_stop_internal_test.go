package sdk

import (
	"io"
	"log/slog"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

// rank0Stopping is rank 0 of a two-rank job whose running generation 3
// stops at step 205 for the given reason.
func rank0Stopping(stop protocol.RankStop) *Job {
	j := &Job{id: "exit2", log: slog.New(slog.NewTextHandler(io.Discard, nil)), changed: make(chan struct{})}
	j.rk = newRanks(&options{rank: 0, world: 2})
	r := j.rk
	r.gen, r.running, r.release, r.stopAt, r.stop = 3, true, 205, 205, stop
	r.peers[1] = peer{proc: 7, session: r.session, gen: 3, step: 200, running: true}
	return j
}

// A rank that reaches the stop rank 0 announced for a preemption exits
// (EXIT mode) and says it closed; under load that can come before rank 0
// has reached the stop itself. It is no lost rank: only a close anywhere
// else, or at a suspension the process should survive, breaks the
// agreement.
func TestRanks_ARankThatClosesAtTheAgreedPreemptionIsNotLost(t *testing.T) {
	closed := func(step int64, gen uint64) *protocol.RankMessage {
		// A follower that stopped to exit does not park, so it says running.
		return &protocol.RankMessage{Rank: 1, Proc: 7, Gen: gen, Step: step, Running: true, Reason: "closed"}
	}
	for _, c := range []struct {
		name string
		stop protocol.RankStop
		msg  *protocol.RankMessage
		lost bool
	}{
		{"at the preemption's stop", protocol.StopPreempt, closed(205, 3), false},
		{"at the end's stop", protocol.StopEnd, closed(205, 3), false},
		{"before the stop", protocol.StopPreempt, closed(204, 3), true},
		{"at the stop of an older generation", protocol.StopPreempt, closed(205, 2), true},
		{"at a suspension (the process should stay)", protocol.StopSuspend, closed(205, 3), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := rank0Stopping(c.stop)
			j.rk.peers[1].session = 0
			c.msg.Session = j.rk.session
			j.onRankStatus(c.msg)
			if lost := j.rk.lost != nil; lost != c.lost {
				t.Errorf("lost %v (%v), want %v", lost, j.rk.lost, c.lost)
			}
		})
	}
}
