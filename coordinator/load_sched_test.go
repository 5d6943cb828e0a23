package coordinator

import (
	"fmt"
	"math"
	"runtime/metrics"
	"time"
)

// schedLatencies reads the runtime's histogram of how long goroutines
// waited, runnable, for a processor (all of the process's goroutines).
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedSince summarizes the waits since before (the load test's window):
// the 99th and 99.9th percentiles and the largest wait's bucket, as the
// upper bounds of the runtime's buckets, and the share over 1 ms.
func schedSince(before *metrics.Float64Histogram) string {
	after := schedLatencies()
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return "not available"
	}
	counts := make([]uint64, len(after.Counts))
	var total, over uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
		if after.Buckets[i] >= 1e-3 {
			over += counts[i]
		}
	}
	if total == 0 {
		return "no waits"
	}
	upper := func(i int) time.Duration {
		b := after.Buckets[i+1]
		if math.IsInf(b, 1) {
			b = after.Buckets[i]
		}
		return time.Duration(b * 1e9).Round(time.Microsecond)
	}
	at := func(q float64) time.Duration {
		want, seen := uint64(math.Ceil(q*float64(total))), uint64(0)
		for i, n := range counts {
			if seen += n; seen >= want {
				return upper(i)
			}
		}
		return upper(len(counts) - 1)
	}
	top := 0
	for i, n := range counts {
		if n > 0 {
			top = i
		}
	}
	return fmt.Sprintf("p99 under %v, p99.9 under %v, the longest under %v; %d of %d waits (%.3f%%) 1 ms or more",
		at(0.99), at(0.999), upper(top), over, total, 100*float64(over)/float64(total))
}
