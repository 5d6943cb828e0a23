package sdk

import (
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The coordinator folds a job's events under a budget (protocol.EventRate a
// second, bursts of protocol.EventBurst) and refuses the rest, counted per
// event. A refused event is lost to the coordinator: its steps and time
// never reach the job's run time, and a refused done event leaves Finish
// waiting for the budget to refill. A node agent carrying a process's
// traffic (the uplink) likewise drops its lines past protocol.UplinkLineRate
// a second. So the SDK keeps a copy of both budgets and publishes no faster
// than they allow; what waits stays buffered, where batch-size changes and
// progress samples coalesce (eventState.push).
//
// The copies run at nine tenths of the budgets: the coordinator's clock is
// when the batch reaches the log, and batches delayed on the way and then
// delivered together find its budget lower than the sender's was when it
// sent them; the tenth covers a second of such bunching.
const (
	paceRate  = protocol.EventRate * 9 / 10
	paceBurst = protocol.EventBurst * 9 / 10
	// paceMin is the fewest events a publication held by the budget waits
	// for, so that a job over its budget sends about ten batches a second
	// rather than one per event.
	paceMin = paceRate / 10

	paceLineRate  = protocol.UplinkLineRate * 9 / 10
	paceLineBurst = protocol.UplinkLineBurst * 9 / 10
)

// pace is the job's copy of its budgets; guarded by Job.mu.
type pace struct {
	events, lines bucket
}

// bucket is a token bucket; the zero value is full at its first use.
type bucket struct {
	tokens float64
	at     time.Time
}

func (b *bucket) refill(now time.Time, rate, burst float64) float64 {
	if b.at.IsZero() {
		b.tokens = burst
	} else if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(burst, b.tokens+dt*rate)
	}
	b.at = now
	return b.tokens
}

// wait is how long until the bucket holds n tokens.
func (b *bucket) wait(n, rate float64) time.Duration {
	return time.Duration((n-b.tokens)/rate*float64(time.Second)) + time.Millisecond
}

// allow says how many of n events may be published at now, as one message
// (lines: the message is an uplink line); when none may, it says how long
// to wait until min(n, paceMin) may.
func (p *pace) allow(now time.Time, n int, lines bool) (int, time.Duration) {
	want := min(n, paceMin)
	var wait time.Duration
	if k := int(p.events.refill(now, paceRate, paceBurst)); k < want {
		wait = p.events.wait(float64(want), paceRate)
	}
	if lines && p.lines.refill(now, paceLineRate, paceLineBurst) < 1 {
		wait = max(wait, p.lines.wait(1, paceLineRate))
	}
	if wait > 0 {
		return 0, wait
	}
	return min(int(p.events.tokens), n), 0
}

// spend takes n events (and a line) from the budgets; negative n gives
// them back, for a publication that failed.
func (p *pace) spend(n int, lines bool) {
	p.events.tokens -= float64(n)
	if lines {
		if n < 0 {
			p.lines.tokens++
		} else {
			p.lines.tokens--
		}
	}
}
