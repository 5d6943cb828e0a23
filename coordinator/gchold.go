package coordinator

import (
	"cmp"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// A round and the garbage collector. A live round's tick → last lease is a
// burst: the solve (at 10,000 jobs the first one admits them all and
// allocates about 70 MB), the round's close and the publication, on two
// cores shared with the event loop and the NATS server. A collection that
// runs meanwhile takes a quarter of the cores for its mark and makes the
// round's goroutines assist it in proportion to what they allocate: in one
// run of the 10,000-job load test the three rounds that overlapped one took
// 67–93 ms, the others 24–42 ms (docs/scale.md, session 17).
//
// So by default the service holds the collector off around each round: from
// a little before the tick (gcHoldLead, a tenth of the round when that is
// shorter) until the round's last lease is flushed, the Go collector's
// percent (GOGC) is raised gcHoldFactor times. No collection then starts in
// the lead before the tick (none is running when the round begins: a mark
// takes tens of milliseconds) nor during the round unless the heap grows
// by several times its live size; the collection the round's allocation
// calls for runs after it, among the events. The heap may grow by what the
// process allocates during the hold (the lead and the round: tens of MB at
// 10,000 jobs) beyond where the collector would have stopped it, once per
// round; a memory limit (GOMEMLIMIT) still applies throughout. A hold ends
// at the latest gcHoldMax after it began, whatever happens to the round
// (a deposed leader, a failed solve). ServiceConfig.KeepGCPercent leaves
// the collector alone. With GOGC=off there is nothing to hold.

const (
	gcHoldFactor = 4
	gcHoldLead   = 500 * time.Millisecond
	gcHoldMax    = 2*time.Second + gcHoldLead
)

// gcHolds counts the process's holds (several services may share a
// process): the first raises the percent, the last puts it back.
var gcHolds struct {
	sync.Mutex
	n     int
	saved int
}

func acquireGC() {
	gcHolds.Lock()
	defer gcHolds.Unlock()
	if gcHolds.n++; gcHolds.n > 1 {
		return
	}
	// SetGCPercent reports the percent only by replacing it: set the raise
	// for 100, then correct it for the percent that was set.
	old := debug.SetGCPercent(100 * gcHoldFactor)
	gcHolds.saved = old
	switch {
	case old < 0: // GOGC=off: nothing to hold
		debug.SetGCPercent(old)
	case old != 100:
		debug.SetGCPercent(old * gcHoldFactor)
	}
}

func releaseGC() {
	gcHolds.Lock()
	defer gcHolds.Unlock()
	if gcHolds.n == 0 {
		return
	}
	if gcHolds.n--; gcHolds.n == 0 {
		debug.SetGCPercent(gcHolds.saved)
	}
}

// gcPercent is the collector's percent now (GOGC; -1 for off), read
// without changing it.
func gcPercent() int {
	v, ok := runtimeCount("/gc/gogc:percent")
	if !ok || v > math.MaxInt32 {
		return -1 // off reads as -1 converted
	}
	return int(v)
}

// gcCycles is how many collections the process completed so far.
func gcCycles() uint64 {
	v, _ := runtimeCount("/gc/cycles/total:gc-cycles")
	return v
}

// runtimeCount reads one of the runtime's integer metrics.
func runtimeCount(name string) (uint64, bool) {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return s[0].Value.Uint64(), true
}

// gcHold is one service's hold around its rounds.
type gcHold struct {
	off     bool
	mu      sync.Mutex
	held    bool
	stopped bool
	start   *time.Timer // begins the hold before the next tick
	limit   *time.Timer // ends it at the latest
	begun   int         // holds begun (tests)
	began   time.Time   // when the last one began (tests)
	// limitAfter replaces gcHoldMax (tests).
	limitAfter time.Duration
}

// beforeTick arranges the hold to begin a lead before a tick due at due,
// for rounds of length round; at once when the tick is nearer than that.
func (h *gcHold) beforeTick(due time.Time, round time.Duration) {
	if h == nil || h.off {
		return
	}
	lead := min(gcHoldLead, round/10)
	wait := time.Until(due) - lead
	h.mu.Lock()
	defer h.mu.Unlock()
	if wait <= 0 {
		h.beginLocked()
		return
	}
	if h.start == nil {
		h.start = time.AfterFunc(wait, h.begin)
	} else {
		h.start.Reset(wait)
	}
}

// begin starts the hold now: the lead's timer, and the tick itself in case
// that timer ran late.
func (h *gcHold) begin() {
	if h == nil || h.off {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beginLocked()
}

// beginLocked starts the hold, or extends one already begun.
func (h *gcHold) beginLocked() {
	if h.stopped {
		return
	}
	limit := cmp.Or(h.limitAfter, gcHoldMax)
	if h.limit == nil {
		h.limit = time.AfterFunc(limit, h.end)
	} else {
		h.limit.Reset(limit)
	}
	if !h.held {
		h.held = true
		h.begun++
		h.began = time.Now()
		acquireGC()
	}
}

// end ends the hold, if one is on: the round's last lease was flushed, its
// limit passed, or the service stops. A nil hold (a Service built apart
// from NewService, in tests) holds nothing.
func (h *gcHold) end() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.held = false
		releaseGC()
	}
}

// stop ends the hold and cancels the one arranged (the service stopped).
func (h *gcHold) stop() {
	h.mu.Lock()
	h.stopped = true
	if h.start != nil {
		h.start.Stop()
	}
	if h.limit != nil {
		h.limit.Stop()
	}
	h.mu.Unlock()
	h.end()
}

// holdsBegun is how many holds began, and when the last one did (tests).
func (h *gcHold) holdsBegun() (int, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.begun, h.began
}
