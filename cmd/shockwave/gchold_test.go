package main

import (
	"strconv"
	"testing"
	"time"
)

// gogcPercent reads the Go collector's percent and the rounds a collection
// completed in from a coordinator's /metrics (-1 where absent).
func gogcPercent(addr string) (percent, collected float64) {
	return metricValue(addr, "go_gc_gogc_percent"), metricValue(addr, "shockwave_rounds_collected_total")
}

// TestCoordinator_TheBinaryHoldsTheCollectorAroundItsRoundsUnlessToldNot:
// a `shockwave coordinator` process with 1 s rounds shows, on its /metrics,
// the collector's percent at four times its own for part of every second
// (the hold: a tenth of the round before each tick until the round's
// leases are sent) and back in between; with --gc-hold=false never raised.
func TestCoordinator_TheBinaryHoldsTheCollectorAroundItsRoundsUnlessToldNot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs coordinator processes for about 10 s")
	}
	for _, hold := range []bool{true, false} {
		t.Run(strconv.FormatBool(hold), func(t *testing.T) {
			listen, web := freePort(t), freePort(t)
			args := []string{"--listen", listen, "--data-dir", t.TempDir(), "--gpus", "2", "--round", "1s",
				"--http", web, "--log-level", "warn", "--gc-hold=" + strconv.FormatBool(hold)}
			_, out, _ := coordProcess(t, args...)
			waitFor(t, 30*time.Second, "the coordinator serves", func() bool { c, _ := healthz(web); return c == 200 })
			seen := map[float64]int{}
			collected := -1.0
			for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				p, c := gogcPercent(web)
				seen[p]++
				collected = c
			}
			base := -1.0
			for p, n := range seen { // the percent most samples saw: between the holds
				if base < 0 || n > seen[base] {
					base = p
				}
			}
			if base <= 0 {
				t.Skipf("the collector's percent reads %v (GOGC=off or not exposed): nothing to hold; samples %v", base, seen)
			}
			if collected < 0 {
				t.Fatalf("/metrics has no shockwave_rounds_collected_total\n%s", out.String())
			}
			if raised := seen[4*base]; hold && raised == 0 || !hold && raised > 0 {
				t.Fatalf("--gc-hold=%v: percent %v seen %d times in 4 s of 1 s rounds (all samples %v)", hold, 4*base, raised, seen)
			}
			if len(seen) > 2 || !hold && len(seen) > 1 {
				t.Fatalf("--gc-hold=%v: percents other than %v and %v: %v", hold, base, 4*base, seen)
			}
		})
	}
}
