package market_test

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/market"
)

// TestReplay_DumpedInstances solves every instance written by
// `shockwave simulate --dump-instances DIR` in the directories listed in
// $MARKET_INSTANCES (colon-separated), checks each result, and reports the
// statuses and the solve-time distribution. Skipped when unset.
//
// With $MARKET_GOLDEN_WRITE=FILE it writes one line per instance, "path
// digest", the digest of its plan (planDigest); with $MARKET_GOLDEN=FILE it
// fails on every instance whose plan differs from the digest recorded
// there. Writing the file with one build and checking it with another
// shows that a change keeps every plan. $MARKET_REPEAT=K solves each
// instance K times and keeps the fastest (less noise from other load);
// $MARKET_VERBOSE=1 logs every solve. CPU is the whole process's user and
// system time over the solve (its garbage collection included).
func TestReplay_DumpedInstances(t *testing.T) {
	dirs := os.Getenv("MARKET_INSTANCES")
	if dirs == "" {
		t.Skip("set MARKET_INSTANCES to directories of dumped instances")
	}
	golden := readGolden(t, os.Getenv("MARKET_GOLDEN"))
	var out *os.File
	if name := os.Getenv("MARKET_GOLDEN_WRITE"); name != "" {
		var err error
		if out, err = os.Create(name); err != nil {
			t.Fatal(err)
		}
		defer out.Close()
	}
	repeat := 1
	if v := os.Getenv("MARKET_REPEAT"); v != "" {
		if _, err := fmt.Sscan(v, &repeat); err != nil || repeat < 1 {
			t.Fatalf("MARKET_REPEAT=%q: want a positive count", v)
		}
	}
	verbose := os.Getenv("MARKET_VERBOSE") != ""
	differ := 0
	for _, dir := range strings.Split(dirs, ":") {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		var times, cpus []time.Duration
		statuses := map[string]int{}
		maxN, worstGap := 0, 0.0
		for _, name := range files {
			p, s := readInstanceFile(t, name)
			var r *market.Result
			best, bestCPU := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			for range repeat {
				start, startCPU := time.Now(), processCPU()
				var err error
				r, err = market.Solve(p, s)
				best, bestCPU = min(best, time.Since(start)), min(bestCPU, processCPU()-startCPU)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			times, cpus = append(times, best), append(cpus, bestCPU)
			if verbose {
				t.Logf("%s: N %d, wall %v, CPU %v, %s, relaxed %v, ρ bound %.4g, %+v",
					filepath.Base(name), len(p.Jobs), best, bestCPU, r.Status, r.Relaxed, r.RhoBound, r.Stats)
			}
			checkReplayed(t, p, s, r)
			statuses[r.Status.String()]++
			maxN = max(maxN, len(p.Jobs))
			worstGap = max(worstGap, r.Gap)
			d := planDigest(r)
			if out != nil {
				fmt.Fprintf(out, "%s %s\n", name, d)
			}
			if want, ok := golden[name]; ok && want != d {
				differ++
				t.Errorf("%s: plan %s, recorded %s", name, d, want)
			}
		}
		if len(times) == 0 {
			continue
		}
		slices.Sort(times)
		slices.Sort(cpus)
		pct := func(v []time.Duration, q float64) time.Duration { return v[min(len(v)-1, int(q*float64(len(v))))] }
		t.Logf("%s: %d solves, N ≤ %d, wall p50 %v p99 %v max %v, CPU p50 %v p99 %v max %v, statuses %v, worst gap %.2g",
			dir, len(times), maxN, pct(times, 0.5), pct(times, 0.99), times[len(times)-1],
			pct(cpus, 0.5), pct(cpus, 0.99), cpus[len(cpus)-1], statuses, worstGap)
	}
	if len(golden) > 0 {
		t.Logf("%d plans differ from the %d recorded", differ, len(golden))
	}
}

// readInstanceFile reads a dumped instance, gzipped when its name ends in .gz.
func readInstanceFile(t *testing.T, name string) (market.Problem, *market.Settings) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(name, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r = z
	}
	in, err := market.ReadInstance(r)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p, s, err := in.Problem()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p, s
}

// checkReplayed is checkResult, with the FTF test of the result's own
// bound when the tightest fairness rule raised it above RhoMax.
func checkReplayed(t *testing.T, p market.Problem, s *market.Settings, r *market.Result) {
	t.Helper()
	if s.Fairness != market.FairnessTightest || r.Relaxed {
		checkResult(t, p, s, r)
		return
	}
	loose := *s
	loose.RhoMax = math.Inf(1) // the objective does not read it
	checkResult(t, p, &loose, r)
	if got := worstRho(p, r.Rounds); got > r.RhoBound*(1+1e-6) {
		t.Fatalf("worst ρ %.9g above the result's bound %.9g", got, r.RhoBound)
	}
}

// planDigest is a SHA-256 of what a solve decides: relaxation,
// the FTF bound, the objective, every job's round count and every
// round's jobs (floats by their bits). Not the certificate (Status,
// Bound, Gap): a faster search may prove more or less about the same plan.
func planDigest(r *market.Result) string {
	h := sha256.New()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	if r.Relaxed {
		put(1)
	} else {
		put(0)
	}
	put(math.Float64bits(r.RhoBound))
	put(math.Float64bits(r.Objective))
	put(uint64(len(r.Rounds)))
	for _, n := range r.Rounds {
		put(uint64(n))
	}
	for _, jobs := range r.Schedule {
		put(uint64(len(jobs)))
		for _, i := range jobs {
			put(uint64(i))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readGolden reads "path digest" lines; an empty name gives none.
func readGolden(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if name == "" {
		return out
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		path, digest, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("%s: line %q is not \"path digest\"", name, sc.Text())
		}
		out[path] = digest
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// processCPU is this process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplay solves the instances in the files listed in
// $MARKET_BENCH_INSTANCES (colon-separated), round-robin. Skipped when
// unset.
func BenchmarkReplay(b *testing.B) {
	names := os.Getenv("MARKET_BENCH_INSTANCES")
	if names == "" {
		b.Skip("set MARKET_BENCH_INSTANCES to instance files")
	}
	var probs []market.Problem
	var sets []*market.Settings
	for _, name := range strings.Split(names, ":") {
		f, err := os.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		in, err := market.ReadInstance(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		p, s, err := in.Problem()
		if err != nil {
			b.Fatal(err)
		}
		probs, sets = append(probs, p), append(sets, s)
	}
	b.ReportAllocs()
	cpu := processCPU()
	i := 0
	for b.Loop() {
		if _, err := market.Solve(probs[i%len(probs)], sets[i%len(probs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportCPU(b, cpu)
}

// reportCPU reports the process's CPU time since cpu per operation
// ("cpu-ns/op"): steadier than the wall time on a shared machine.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}
