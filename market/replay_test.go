package market_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/market"
)

// TestReplay_DumpedInstances solves every instance written by
// `shockwave simulate --dump-instances DIR` in the directories listed in
// $MARKET_INSTANCES (colon-separated), checks each result, and reports the
// statuses and the solve-time distribution. Skipped when unset.
func TestReplay_DumpedInstances(t *testing.T) {
	dirs := os.Getenv("MARKET_INSTANCES")
	if dirs == "" {
		t.Skip("set MARKET_INSTANCES to directories of dumped instances")
	}
	for _, dir := range strings.Split(dirs, ":") {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		var times []time.Duration
		statuses := map[string]int{}
		maxN, worstGap := 0, 0.0
		for _, name := range files {
			f, err := os.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			in, err := market.ReadInstance(f)
			f.Close()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			p, s, err := in.Problem()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			start := time.Now()
			r, err := market.Solve(p, s)
			times = append(times, time.Since(start))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkResult(t, p, s, r)
			statuses[r.Status.String()]++
			maxN = max(maxN, len(p.Jobs))
			worstGap = max(worstGap, r.Gap)
		}
		if len(times) == 0 {
			continue
		}
		slices.Sort(times)
		pct := func(q float64) time.Duration { return times[min(len(times)-1, int(q*float64(len(times))))] }
		t.Logf("%s: %d solves, N ≤ %d, p50 %v p99 %v max %v, statuses %v, worst gap %.2g",
			dir, len(times), maxN, pct(0.5), pct(0.99), times[len(times)-1], statuses, worstGap)
	}
}
