package coordinator

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

// setGCPercent sets the collector's percent for a test and puts the one
// before back after it.
func setGCPercent(t *testing.T, p int) {
	t.Helper()
	old := debug.SetGCPercent(p)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	if got := gcPercent(); got != p {
		t.Fatalf("percent reads %d after setting %d", got, p)
	}
}

// TestGCHold_TheFirstHoldRaisesThePercentAndTheLastPutsItBack: two
// services' holds overlapping raise the percent once, four times the one
// set, and it comes back exactly when the second ends; ending a hold twice
// changes nothing.
func TestGCHold_TheFirstHoldRaisesThePercentAndTheLastPutsItBack(t *testing.T) {
	for _, base := range []int{100, 250} {
		t.Run(fmt.Sprint(base), func(t *testing.T) {
			setGCPercent(t, base)
			a, b := &gcHold{}, &gcHold{}
			defer a.stop()
			defer b.stop()
			a.begin()
			if got := gcPercent(); got != base*gcHoldFactor {
				t.Fatalf("held: percent %d, want %d", got, base*gcHoldFactor)
			}
			b.begin()
			a.end()
			a.end()
			if got := gcPercent(); got != base*gcHoldFactor {
				t.Fatalf("one of two holds ended: percent %d, want %d", got, base*gcHoldFactor)
			}
			b.end()
			if got := gcPercent(); got != base {
				t.Fatalf("both holds ended: percent %d, want %d back", got, base)
			}
			if na, _ := a.holdsBegun(); na != 1 {
				t.Fatalf("holds begun %d, want 1", na)
			}
		})
	}
}

// TestGCHold_LeavesACollectorThatIsOffAlone: with GOGC=off a hold sets no
// percent, and ending it leaves the collector off.
func TestGCHold_LeavesACollectorThatIsOffAlone(t *testing.T) {
	setGCPercent(t, -1)
	h := &gcHold{}
	defer h.stop()
	h.begin()
	if got := gcPercent(); got != -1 {
		t.Fatalf("held with the collector off: percent %d", got)
	}
	h.end()
	if got := gcPercent(); got != -1 {
		t.Fatalf("after the hold: percent %d, want the collector still off", got)
	}
}

// TestGCHold_EndsByItselfAtItsLimitAndNeverAfterStop: a hold whose round
// never ends (a deposed leader, a failed solve) ends at its limit; a tick
// nearer than the lead begins one at once; a stopped hold begins none.
func TestGCHold_EndsByItselfAtItsLimitAndNeverAfterStop(t *testing.T) {
	setGCPercent(t, 100)
	h := &gcHold{limitAfter: 100 * time.Millisecond}
	h.beforeTick(time.Now().Add(10*time.Millisecond), time.Second) // nearer than the lead
	if got := gcPercent(); got != 100*gcHoldFactor {
		t.Fatalf("tick within the lead: percent %d, want the hold on", got)
	}
	eventually(t, 5*time.Second, "the hold ends at its limit", func() bool { return gcPercent() == 100 })
	due := time.Now().Add(time.Second)
	h.beforeTick(due, 5*time.Second) // a lead of gcHoldLead: begins in 0.5 s
	if got := gcPercent(); got != 100 {
		t.Fatalf("a tick 1 s away: percent %d at once, want the hold to wait for its lead", got)
	}
	eventually(t, 5*time.Second, "the hold begins a lead before the tick", func() bool { return gcPercent() == 100*gcHoldFactor })
	if n, began := h.holdsBegun(); n != 2 || began.Before(due.Add(-gcHoldLead)) {
		t.Fatalf("holds begun %d, the last %v before the tick (lead %v)", n, due.Sub(began), gcHoldLead)
	}
	h.end()
	h.beforeTick(time.Now().Add(time.Second), time.Second) // a lead of a tenth of the round: begins in 0.9 s
	h.stop()
	time.Sleep(1200 * time.Millisecond)
	if n, _ := h.holdsBegun(); gcPercent() != 100 || n != 2 {
		t.Fatalf("stopped before its start: percent %d, holds begun %d (want 100, 2)", gcPercent(), n)
	}
	h.begin()
	if got := gcPercent(); got != 100 {
		t.Fatalf("begin after stop: percent %d", got)
	}
}

// TestService_HoldsTheCollectorFromBeforeEachTickUntilItsLeasesAreFlushed:
// a live service has the percent raised when its timer fires a round's
// tick and when the round's last lease is flushed, begins a hold per round,
// and leaves the percent as it found it once stopped; with KeepGCPercent it
// never changes the percent.
func TestService_HoldsTheCollectorFromBeforeEachTickUntilItsLeasesAreFlushed(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			setGCPercent(t, 100)
			want := 100 * gcHoldFactor
			if keep {
				want = 100
			}
			var mu sync.Mutex
			var atTick, atFlush []int
			early := 0 // ticks whose hold began a lead before the timer fired them
			var svc **Service
			e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) {
				s.Core.RoundSeconds = 0.3 // a lead of 30 ms: a late timer still begins the hold before most ticks
				s.KeepGCPercent = keep
				s.onStep = func(kind string, d time.Duration) {
					if kind == "timer" {
						fired := time.Now().Add(-d)
						mu.Lock()
						atTick = append(atTick, gcPercent())
						if svc == nil { // set once newEnv returns
							mu.Unlock()
							return
						}
						// 2 ms clears the time between the step's end and
						// this.
						if _, began := (*svc).gc.holdsBegun(); !began.IsZero() && began.Before(fired.Add(-2*time.Millisecond)) {
							early++
						}
						mu.Unlock()
					}
				}
				s.onRound = func(*Round, roundTimes) {
					mu.Lock()
					atFlush = append(atFlush, gcPercent())
					mu.Unlock()
				}
			})
			mu.Lock()
			svc = &e.svc
			mu.Unlock()
			nc := e.client()
			if rep := register(t, nc, e.subj, newJob("g1", 1)); rep.Error != nil {
				t.Fatalf("registration: %+v", rep.Error)
			}
			eventually(t, 20*time.Second, "five rounds flushed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(atFlush) >= 5
			})
			e.stopService()
			mu.Lock()
			defer mu.Unlock()
			for i, p := range atTick {
				if p != want {
					t.Fatalf("tick %d fired with the percent at %d, want %d (all: %v)", i, p, want, atTick)
				}
			}
			for i, p := range atFlush {
				if p != want {
					t.Fatalf("round %d flushed with the percent at %d, want %d (all: %v)", i, p, want, atFlush)
				}
			}
			if got := gcPercent(); got != 100 {
				t.Fatalf("after the service stopped: percent %d, want 100", got)
			}
			if begun, _ := e.svc.gc.holdsBegun(); keep && begun != 0 || !keep && begun < len(atFlush)-1 {
				t.Fatalf("%d holds begun over %d rounds", begun, len(atFlush))
			}
			if !keep && early == 0 {
				t.Fatalf("no hold of %d ticks began before its timer fired: none had its lead", len(atTick))
			}
		})
	}
}

// TestService_CountsTheRoundsACollectionCompletedIn: a collection forced
// while two rounds are open (the timer just fired them) is counted in those
// rounds' times and in shockwave_rounds_collected_total, which counts
// exactly the rounds whose times saw one.
func TestService_CountsTheRoundsACollectionCompletedIn(t *testing.T) {
	var mu sync.Mutex
	ticks := 0
	var cycles []uint64
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.onStep = func(kind string, _ time.Duration) {
			if kind != "timer" {
				return
			}
			mu.Lock()
			ticks++
			force := ticks == 3 || ticks == 5
			mu.Unlock()
			if force {
				runtime.GC() // completes a cycle before the loop goes on
			}
		}
		s.onRound = func(_ *Round, times roundTimes) {
			mu.Lock()
			cycles = append(cycles, times.GCCycles)
			mu.Unlock()
		}
	})
	nc := e.client()
	if rep := register(t, nc, e.subj, newJob("g1", 1)); rep.Error != nil {
		t.Fatalf("registration: %+v", rep.Error)
	}
	eventually(t, 20*time.Second, "seven rounds flushed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(cycles) >= 7
	})
	e.stopService()
	mu.Lock()
	defer mu.Unlock()
	collected := 0
	for _, c := range cycles {
		if c > 0 {
			collected++
		}
	}
	if collected < 2 {
		t.Fatalf("rounds with a collection: %d, want at least the 2 forced (cycles per round: %v)", collected, cycles)
	}
	if got := counterValue(t, e.reg, "shockwave_rounds_collected_total", "", ""); got != float64(collected) {
		t.Fatalf("shockwave_rounds_collected_total %v, want %d (cycles per round: %v)", got, collected, cycles)
	}
}
