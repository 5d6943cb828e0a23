package policy

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/bayes"
)

// The live coordinator's shape at scale (coordinator/load_test.go,
// docs/scale.md "Live coordinator at 10,000 jobs"): every job a ResNet-18
// of width 1 or 2 at batch size 32 on 50,000 samples, 1,000,000 steps, no
// declared mode or schedule; a running job makes 100 steps/s; 5 s rounds;
// nodes of 8 GPUs.
const (
	liveRoundSeconds = 5
	liveStepsPerSec  = 100
	liveTotalSteps   = 1_000_000
)

func liveScaleJobs(n int) []*Job {
	jobs := make([]*Job, n)
	for i := range jobs {
		jobs[i] = &Job{ID: fmt.Sprintf("job-%05d", i), Seq: i, Model: "ResNet-18", Workers: 1 + i%2, Priority: 1,
			InitialBatchSize: 32, BatchSize: 32, DatasetSize: 50000, TotalSteps: liveTotalSteps, LastRun: -1}
	}
	return jobs
}

// liveScale drives a Shockwave policy the way the Core does at the live
// load test's scale: every job admitted in round 0, then rounds in which
// the jobs the plan runs make progress and report one measurement.
type liveScale struct {
	p     *Shockwave
	jobs  []*Job
	snap  Snapshot
	admit time.Duration // the Admit calls of round 0 (and the Reserve before them)
	// noReserve admits without Reserve (SHOCKWAVE_BENCH_NO_RESERVE, to
	// compare)
	noReserve bool
	first     time.Duration   // round 0's Allocate
	solved    []time.Duration // later rounds that re-solved the market
	kept      []time.Duration // later rounds that followed the stored plan
	// the same, in CPU time of the benchmark's thread (threadCPU)
	admitCPU, firstCPU time.Duration
	solvedCPU, keptCPU []time.Duration
	// forecasts made after round 0, how many equal the job's forecast of
	// the round before, and how many of the others are of jobs that
	// reported nothing new (did not run in the round before)
	forecasts, same, movedUnreported int
	ran                              map[string]bool // the round before's
	// dynamic: every other job is a gns job that doubles its batch size
	// after epochs 2 and 4 (to 128); samples done per job
	dynamic bool
	samples map[string]int64
}

func newLiveScale(tb testing.TB, jobs, gpus int, dynamic bool) *liveScale {
	tb.Helper()
	cfg := DefaultShockwaveConfig()
	if v := os.Getenv("SHOCKWAVE_BENCH_BUDGET"); v != "" { // a forecast budget other than the default
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatalf("SHOCKWAVE_BENCH_BUDGET=%q: %v", v, err)
		}
		cfg.ForecastBudget = n
	}
	p, err := NewShockwave(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	nodes := make([]int, gpus/8)
	for i := range nodes {
		nodes[i] = 8
	}
	s := &liveScale{p: p, jobs: liveScaleJobs(jobs), dynamic: dynamic, samples: map[string]int64{},
		noReserve: os.Getenv("SHOCKWAVE_BENCH_NO_RESERVE") != ""}
	if dynamic {
		for i, j := range s.jobs {
			if i%2 == 1 {
				j.Mode = "gns"
			}
		}
	}
	s.snap = Snapshot{GPUs: gpus, Nodes: nodes, RoundSeconds: liveRoundSeconds, Jobs: s.jobs}
	return s
}

// round runs round r: Admit every job in round 0, then Allocate, then the
// progress of the jobs it runs, folded into their views for round r+1.
func (s *liveScale) round(tb testing.TB, r int) {
	tb.Helper()
	s.snap.Round, s.snap.Now = r, float64(r*liveRoundSeconds)
	if r == 0 {
		t0, c0 := time.Now(), threadCPU()
		if !s.noReserve {
			s.p.Reserve(len(s.jobs)) // as the Core does before a boundary's admissions
		}
		for _, j := range s.jobs {
			j.AdmitTime = s.snap.Now
			s.p.Admit(j)
		}
		s.admit, s.admitCPU = time.Since(t0), time.Duration(threadCPU()-c0)
	}
	prev := map[string]bayes.Forecast{}
	for id, e := range s.p.online.jobs {
		prev[id] = e.forecast
	}
	t0, c0 := time.Now(), threadCPU()
	plan, err := s.p.Allocate(&s.snap)
	d, cpu := time.Since(t0), time.Duration(threadCPU()-c0)
	if r > 0 {
		for id, e := range s.p.online.jobs {
			s.forecasts++
			if g, ok := prev[id]; ok && g == e.forecast {
				s.same++
			} else if !s.ran[id] {
				s.movedUnreported++
			}
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	switch {
	case r == 0:
		s.first, s.firstCPU = d, cpu
	case plan.Solved:
		s.solved, s.solvedCPU = append(s.solved, d), append(s.solvedCPU, cpu)
	default:
		s.kept, s.keptCPU = append(s.kept, d), append(s.keptCPU, cpu)
	}
	byID := make(map[string]*Job, len(s.jobs))
	for _, j := range s.jobs {
		byID[j.ID] = j
	}
	s.ran = make(map[string]bool, len(plan.Run))
	for _, id := range plan.Run {
		s.ran[id] = true
		s.progress(byID[id], r)
	}
}

// progress folds one round of execution into j: at the current batch
// size, 100 steps/s at 32 and 7 % more samples/s per doubling; a dynamic
// job doubles its batch size once it has done 2 and 4 epochs (the steps
// are recounted at the new size, as the Core's rescale does).
func (s *liveScale) progress(j *Job, r int) {
	const total = liveTotalSteps * 32 // samples
	thr := liveStepsPerSec * 32 / float64(j.BatchSize) * math.Pow(1.07, math.Log2(float64(j.BatchSize)/32))
	done := min(total, s.samples[j.ID]+int64(thr*liveRoundSeconds)*int64(j.BatchSize))
	s.samples[j.ID] = done
	if s.dynamic && j.Mode == "gns" && j.BatchSize < 128 && done >= int64(j.DatasetSize)*int64(2*(1+j.BatchSize/64)) {
		j.BatchSize *= 2
	}
	j.StepsDone, j.TotalSteps = done/int64(j.BatchSize), total/int64(j.BatchSize)
	j.RunTime += liveRoundSeconds
	j.Epoch = int(done / int64(j.DatasetSize))
	j.Measurements = append(j.Measurements, Measurement{Round: r + 1, Throughput: thr, BatchSize: j.BatchSize})
	j.LastRun = r
}

func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / 1e6
}

// heapBytes is the live heap after a collection.
func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkShockwaveLive_10000Jobs2560GPUs measures the policy's share of
// a live round at the load test's 10,000-job shape: the Admit calls and
// the Allocate of the first round, and 24 further rounds' Allocate, split
// into those that re-solved the market and those that did not (ms, p50 and
// p99 of each; with so few rounds the p99 is the maximum), in wall time
// and in the CPU time of the benchmark's thread (-cpu-: steadier on a
// shared machine; the garbage collector's background work on other
// threads is not in it), the live heap the policy holds per job
// (policy-B/job, the jobs' own views excluded), the size of its saved
// state per job and the CPU time of saving it, and the share of forecasts equal to the job's forecast
// of the round before. Run with -benchtime 1x.
func BenchmarkShockwaveLive_10000Jobs2560GPUs(b *testing.B) { benchLive(b, 10_000, 2_560, 24, false) }

// BenchmarkShockwaveLive_Dynamic_10000Jobs2560GPUs is the same with half
// the jobs gns jobs that double their batch size twice (progress), so that
// their forecasts keep probability moving between batch-size levels.
func BenchmarkShockwaveLive_Dynamic_10000Jobs2560GPUs(b *testing.B) {
	benchLive(b, 10_000, 2_560, 24, true)
}

// BenchmarkShockwaveLive_FirstRound_10000Jobs2560GPUs is the first round
// alone: 10,000 admissions and the first Allocate.
func BenchmarkShockwaveLive_FirstRound_10000Jobs2560GPUs(b *testing.B) {
	benchLive(b, 10_000, 2_560, 0, false)
}

// BenchmarkShockwaveLive_EpochLimit_10000Jobs2560GPUs is the 10,000-job
// shape with every tenth job declaring the most epochs a registration may
// (bayes.MaxJobEpochs: 10 steps an epoch for its 1,000,000 steps), as a
// tenant could: what such jobs cost the rounds of everyone else.
func BenchmarkShockwaveLive_EpochLimit_10000Jobs2560GPUs(b *testing.B) {
	benchLiveHistory(b, 10_000, 2_560, 24, false, 10, 0)
}

// BenchmarkShockwaveLive_MatureFamilies_10000Jobs2560GPUs is the 10,000-job
// shape in a cluster with history: before the first round, 20 jobs of the
// same shape ran to completion and taught the model's families every
// epoch (the load test and the benchmark above start with empty families,
// whose data then reaches only the few epochs the running jobs passed).
func BenchmarkShockwaveLive_MatureFamilies_10000Jobs2560GPUs(b *testing.B) {
	benchLiveHistory(b, 10_000, 2_560, 24, false, 0, 20)
}

// BenchmarkShockwaveLive_MatureFamilies_Dynamic_10000Jobs2560GPUs is the
// same with the dynamic shape: half the jobs, and half the completed ones,
// gns jobs that doubled their batch size after epochs 2 and 4.
func BenchmarkShockwaveLive_MatureFamilies_Dynamic_10000Jobs2560GPUs(b *testing.B) {
	benchLiveHistory(b, 10_000, 2_560, 24, true, 0, 20)
}

// BenchmarkShockwaveLive_EpochLimit_Dynamic_10000Jobs2560GPUs is the same
// with the jobs at the limit gns jobs: their forecasts move between batch
// sizes at every epoch, so no still tail shortens them.
func BenchmarkShockwaveLive_EpochLimit_Dynamic_10000Jobs2560GPUs(b *testing.B) {
	benchLiveHistory(b, 10_000, 2_560, 24, true, -10, 0)
}

// BenchmarkShockwaveLive_2000Jobs512GPUs is the same at the 2,000-job shape.
func BenchmarkShockwaveLive_2000Jobs512GPUs(b *testing.B) { benchLive(b, 2_000, 512, 24, false) }

// BenchmarkShockwaveLive_SteadyState_1000Jobs1024GPUs runs 1,000 jobs on
// 1,024 GPUs for 100 rounds, so that most jobs have run more rounds than
// the change-point detector's longest run (its per-job cells are then all
// grown): the policy-B/job of a long-running cluster.
func BenchmarkShockwaveLive_SteadyState_1000Jobs1024GPUs(b *testing.B) {
	benchLive(b, 1_000, 1_024, 100, false)
}

func benchLive(b *testing.B, jobs, gpus, rounds int, dynamic bool) {
	benchLiveHistory(b, jobs, gpus, rounds, dynamic, 0, 0)
}

// teachHistory completes n jobs of the live shape in the policy's
// forecaster, as if they had run before: every epoch of each teaches the
// model's families (a dynamic history job, every other one, doubles its
// batch size after epochs 2 and 4, as the dynamic shape's jobs do).
func (s *liveScale) teachHistory(tb testing.TB, n int) {
	tb.Helper()
	fc := s.p.online.fc
	for k := range n {
		j := &Job{ID: fmt.Sprintf("history-%d", k), Model: "ResNet-18", Workers: 1 + k%2, Priority: 1,
			InitialBatchSize: 32, BatchSize: 32, DatasetSize: 50000, TotalSteps: liveTotalSteps}
		if s.dynamic && k%2 == 1 {
			j.Mode = "gns"
		}
		if err := fc.Admit(s.p.online.spec(j)); err != nil {
			tb.Fatal(err)
		}
		bs, total := 32, int64(liveTotalSteps)
		if j.Mode == "gns" {
			for _, at := range []int64{2, 4} { // epochs done at the old size, then the total recounted
				steps := at * 50000 / int64(bs)
				o := bayes.Observation{BatchSize: bs, StepsDone: steps, TotalSteps: total, Elapsed: 60, Throughput: 100}
				if err := fc.Observe(j.ID, o); err != nil {
					tb.Fatal(err)
				}
				total, bs = total/2, bs*2
				o = bayes.Observation{BatchSize: bs, StepsDone: steps / 2, TotalSteps: total, Elapsed: 1, Throughput: 60}
				if err := fc.Observe(j.ID, o); err != nil {
					tb.Fatal(err)
				}
			}
		}
		o := bayes.Observation{BatchSize: bs, StepsDone: total, TotalSteps: total, Elapsed: 60, Throughput: 100}
		if err := fc.Observe(j.ID, o); err != nil {
			tb.Fatal(err)
		}
		fc.Complete(j.ID)
	}
}

// benchLiveHistory is benchLive with every longEvery-th job (none if 0)
// at the epoch limit (gns jobs if longEvery is negative: every
// −longEvery-th), after history completed jobs (teachHistory).
func benchLiveHistory(b *testing.B, jobs, gpus, rounds int, dynamic bool, longEvery, history int) {
	runtime.LockOSThread() // threadCPU measures this goroutine's thread
	defer runtime.UnlockOSThread()
	for range b.N {
		s := newLiveScale(b, jobs, gpus, dynamic)
		s.teachHistory(b, history)
		if longEvery != 0 {
			for i := 0; i < jobs; i += max(longEvery, -longEvery) {
				s.jobs[i].DatasetSize = 32 * int(liveTotalSteps/bayes.MaxJobEpochs) // 10 steps an epoch
				if longEvery < 0 {
					s.jobs[i].Mode = "gns"
				}
			}
		}
		for r := range rounds + 1 {
			s.round(b, r)
		}
		c0 := threadCPU()
		state := len(s.p.MarshalState())
		stateCPU := time.Duration(threadCPU() - c0)
		with := heapBytes()
		if f := os.Getenv("SHOCKWAVE_BENCH_HEAP"); f != "" { // a heap profile with the policy live
			writeHeapProfile(b, f)
		}
		s.p = nil // what the policy alone holds: the heap with it less the heap without
		policyHeap := float64(with) - float64(heapBytes())
		runtime.KeepAlive(s)
		b.ReportMetric(float64(s.admit)/1e6, "admit-ms")
		b.ReportMetric(float64(s.first)/1e6, "first-ms")
		b.ReportMetric(pct(s.solved, 0.5), "solved-p50-ms")
		b.ReportMetric(pct(s.solved, 0.99), "solved-p99-ms")
		b.ReportMetric(pct(s.kept, 0.5), "kept-p50-ms")
		b.ReportMetric(pct(s.kept, 0.99), "kept-p99-ms")
		b.ReportMetric(float64(s.admitCPU)/1e6, "admit-cpu-ms")
		b.ReportMetric(float64(s.firstCPU)/1e6, "first-cpu-ms")
		b.ReportMetric(pct(s.solvedCPU, 0.5), "solved-cpu-p50-ms")
		b.ReportMetric(pct(s.solvedCPU, 0.99), "solved-cpu-p99-ms")
		b.ReportMetric(pct(s.keptCPU, 0.5), "kept-cpu-p50-ms")
		b.ReportMetric(pct(s.keptCPU, 0.99), "kept-cpu-p99-ms")
		b.ReportMetric(float64(len(s.solved)), "solved-rounds")
		b.ReportMetric(100*float64(s.same)/float64(max(s.forecasts, 1)), "same-forecast-%")
		b.ReportMetric(100*float64(s.movedUnreported)/float64(max(s.forecasts, 1)), "moved-unreported-%")
		b.ReportMetric(policyHeap/float64(jobs), "policy-B/job")
		b.ReportMetric(float64(state)/float64(jobs), "state-B/job")
		b.ReportMetric(float64(stateCPU)/1e6, "state-cpu-ms")
	}
}

func writeHeapProfile(tb testing.TB, file string) {
	f, err := os.Create(file)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

// TestExplainReasons_AreTheFormattedSentences: the tabled reasons are the
// sentences explain formatted for every window and planned-round count,
// inside the table and beyond it.
func TestExplainReasons_AreTheFormattedSentences(t *testing.T) {
	for n := range 200 {
		if got, want := noRoundsReason(n), fmt.Sprintf("the market plans it no rounds in the next %d", n); got != want {
			t.Fatalf("%d: %q, want %q", n, got, want)
		}
		if got, want := laterReason(n), fmt.Sprintf("its %d planned rounds come later in the window", n); got != want {
			t.Fatalf("%d: %q, want %q", n, got, want)
		}
	}
}
