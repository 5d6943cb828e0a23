package pollux

import (
	"math"
	"slices"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/topology"
)

// linearJob is a job of trace width k whose slowdown is linear in its
// width, with run seconds of work at k of which the share left remains
// (run 0: no forecast yet).
func linearJob(k int, run, left float64) widthJob {
	j := widthJob{slow: make([]float64, k+1), run: run, left: left}
	j.slow[0] = math.Inf(1)
	for w := 1; w <= k; w++ {
		j.slow[w] = float64(k) / float64(w)
	}
	return j
}

// flatJob is a job of trace width k that gains nothing past width flat.
func flatJob(k, flat int, run float64) widthJob {
	j := linearJob(k, run, 1)
	for w := flat; w <= k; w++ {
		j.slow[w] = j.slow[flat] * (1 + 1e-3*float64(k-w)) // a hair better at its trace width
	}
	j.slow[k] = 1
	return j
}

func sum(w []int) int {
	s := 0
	for _, v := range w {
		s += v
	}
	return s
}

func TestElasticWidths_TraceWidthsThatFitAreKept(t *testing.T) {
	jobs := []widthJob{linearJob(16, 600, 1), linearJob(8, 0, 1), linearJob(1, 60, 0.5), linearJob(12, 3000, 0.2)}
	if got := elasticWidths(jobs, make([]int, 4), 37); !slices.Equal(got, []int{16, 8, 1, 12}) {
		t.Fatalf("widths %v on 37 GPUs, want the trace widths", got)
	}
}

// TestElasticWidths_OversubscribedJobsGetAtLeastOneGPUAndFillTheCluster
// checks, on many loads, that no job is wider than its trace width or
// narrower than one GPU, and that the GPUs are all used while some job
// can still use one; with more jobs than GPUs every job gets one.
func TestElasticWidths_OversubscribedJobsGetAtLeastOneGPUAndFillTheCluster(t *testing.T) {
	pool := []int{1, 4, 6, 8, 12, 16, 24, 32, 48}
	for n := 1; n <= 40; n++ {
		jobs := make([]widthJob, n)
		cur := make([]int, n)
		want := 0
		for i := range jobs {
			k := pool[(i*7+n)%len(pool)]
			jobs[i] = linearJob(k, float64(100*(1+(i*13)%17)), 1/float64(1+i%3))
			if i%4 == 0 {
				jobs[i].run = 0 // no forecast yet
			}
			if i%3 == 0 {
				cur[i] = min(k, 1+i%5)
			}
			want += k
		}
		for _, gpus := range []int{16, 64, 128} {
			for _, c := range [][]int{make([]int, n), cur} {
				got := elasticWidths(jobs, c, gpus)
				if want <= gpus {
					continue
				}
				for i, w := range got {
					if w < 1 || w > jobs[i].trace() {
						t.Fatalf("n=%d G=%d: job %d of width %d gets %d", n, gpus, i, jobs[i].trace(), w)
					}
				}
				// Running jobs may leave GPUs idle rather than restart for a
				// gain below a restart; these loads have none.
				if s := sum(got); (n <= gpus && s != gpus) || (n > gpus && s != n) {
					t.Fatalf("n=%d G=%d: widths %v use %d GPUs", n, gpus, got, s)
				}
			}
		}
	}
}

// TestElasticWidths_GPUsGoToNewJobsThenToShortJobsThatScale: a job with
// no forecast yet is grown first, then the job with less work left, and a
// job that gains nothing from more GPUs gets none of the spare ones.
func TestElasticWidths_GPUsGoToNewJobsThenToShortJobsThatScale(t *testing.T) {
	none := make([]int, 3)
	got := elasticWidths([]widthJob{linearJob(8, 1000, 1), linearJob(8, 0, 1), linearJob(8, 100, 1)}, none, 12)
	if got[1] != 8 || got[2] <= got[0] || sum(got) != 12 {
		t.Fatalf("widths %v: want the new job at 8, the short job wider than the long one", got)
	}
	got = elasticWidths([]widthJob{flatJob(8, 2, 100), linearJob(8, 100, 1), linearJob(8, 100, 1)}, none, 12)
	if got[0] != 2 || got[1]+got[2] != 10 {
		t.Fatalf("widths %v: want the job that stops scaling at 2 GPUs kept at 2", got)
	}
}

// TestElasticWidths_AJobWhoseModelGivesNoGoodputStaysAtOneGPU: widths
// where a job's reported model gives no goodput (+Inf slowdown, also from a
// NaN goodput) are never chosen, and the GPUs go to the others.
func TestElasticWidths_AJobWhoseModelGivesNoGoodputStaysAtOneGPU(t *testing.T) {
	bad := linearJob(8, 100, 1)
	for w := 2; w <= 8; w++ {
		bad.slow[w] = math.Inf(1)
	}
	got := elasticWidths([]widthJob{bad, linearJob(8, 100, 1), linearJob(8, 0, 1)}, []int{1, 0, 0}, 12)
	if got[0] != 1 || got[1]+got[2] != 11 {
		t.Fatalf("widths %v: want the job with no goodput past 1 GPU at 1", got)
	}
}

// TestElasticWidths_RunningJobsChangeWidthOnlyWhenItPays: a running job
// grows only when that saves more than a restart, and keeps a width it
// would lose while the GPUs cover it.
func TestElasticWidths_RunningJobsChangeWidthOnlyWhenItPays(t *testing.T) {
	// Two equal 8-wide jobs on 8 GPUs get 4 each from scratch. The first
	// runs on 2 with 40 s left at 8 GPUs (160 s at 2, 80 s at 4): growing
	// saves 80 s > 30 s, so it grows; with 10 s left (40 s at 2, 20 s at 4)
	// it stays, and the GPUs go to the other job.
	for _, c := range []struct {
		run  float64
		want []int
	}{{40, []int{4, 4}}, {10, []int{2, 6}}} {
		jobs := []widthJob{linearJob(8, c.run, 1), linearJob(8, c.run, 1)}
		if got := elasticWidths(jobs, []int{2, 0}, 8); !slices.Equal(got, c.want) {
			t.Fatalf("run %v s: widths %v, want %v", c.run, got, c.want)
		}
	}
	// A job running on 6 whose share from scratch is 4 keeps its 6 while
	// the other jobs leave the GPUs free: here they cannot use them.
	jobs := []widthJob{linearJob(8, 100, 1), linearJob(2, 100, 1), linearJob(2, 100, 1)}
	if got := elasticWidths(jobs, []int{6, 2, 2}, 10); !slices.Equal(got, []int{6, 2, 2}) {
		t.Fatalf("widths %v, want the running widths kept", got)
	}
}

func TestPlacePacked_TakesTheFullestNodeThatHoldsTheJob(t *testing.T) {
	free := []int{4, 2, 3, 1}
	if got := placePacked(free, 2); !slices.Equal(got, []int{1, 1}) || free[1] != 0 {
		t.Fatalf("placed %v, free %v", got, free)
	}
	if got := placePacked(free, 6); len(got) != 6 { // no node holds 6: most-free spreading
		t.Fatalf("placed %v", got)
	}
}

// TestProject_AgentModeShrinksJobsOnlyWhenOversubscribed: in agent mode a
// job alone runs at its trace width, and jobs that together exceed the
// cluster run narrower, all at once on every GPU (three new 8-wide jobs
// on 8 GPUs: 3, 3 and 2); in trace mode they keep their widths.
func TestProject_AgentModeShrinksJobsOnlyWhenOversubscribed(t *testing.T) {
	apps := mustApps(t)
	nodes := topology.Uniform(2, 4)
	rows := []WorkloadRow{{"cifar10-0", 0, "cifar10", 8, 512}, {"cifar10-1", 0, "cifar10", 8, 512}, {"cifar10-2", 0, "cifar10", 8, 512}}
	for _, c := range []struct {
		batch string
		rows  []WorkloadRow
		want  []int // widths of the running jobs at the first round
	}{
		{BatchAgent, rows[:1], []int{8}},
		{BatchAgent, rows, []int{3, 3, 2}},
		{BatchTrace, rows, []int{8}},
	} {
		pol, err := NewProject("shockwave", policy.Options{Config: onlineShockwave()}, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		seen := false
		cfg := Config{Workload: c.rows, Apps: apps, Nodes: nodes, Policy: pol, Setup: pol.Setup,
			OnInterval: func(now int, active []*Job) {
				if seen {
					return
				}
				seen = true
				var got []int
				for _, j := range active {
					if len(j.Alloc) > 0 {
						got = append(got, len(j.Alloc))
					}
				}
				if !slices.Equal(got, c.want) {
					t.Errorf("%s, %d jobs: running widths %v at first, want %v", c.batch, len(c.rows), got, c.want)
				}
			}}
		if _, err := Run(cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProject_ElasticRunsAreDeterministic: two runs of shockwave+agent on
// the same workload give every job the same completion and restarts.
func TestProject_ElasticRunsAreDeterministic(t *testing.T) {
	apps := mustApps(t)
	rows := smallWorkload(10)
	nodes := topology.Uniform(4, 4)
	var runs [2][]*Job
	for k := range runs {
		pol, err := NewProject("shockwave", policy.Options{Config: onlineShockwave()}, BatchAgent)
		if err != nil {
			t.Fatal(err)
		}
		if runs[k], err = Run(Config{Workload: rows, Apps: apps, Nodes: nodes, Policy: pol, Setup: pol.Setup}); err != nil {
			t.Fatal(err)
		}
	}
	shrunk := false
	for i, j := range runs[0] {
		o := runs[1][i]
		if j.Name != o.Name || j.Completion != o.Completion || j.Restarts != o.Restarts || j.Progress != o.Progress {
			t.Fatalf("job %s: completion %d/%d, restarts %d/%d", j.Name, j.Completion, o.Completion, j.Restarts, o.Restarts)
		}
		shrunk = shrunk || j.TargetReplicas < j.Replicas
	}
	t.Logf("a job ended narrower than its trace width: %v", shrunk)
}
