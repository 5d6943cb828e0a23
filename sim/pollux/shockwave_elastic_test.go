package pollux

import (
	"slices"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/topology"
)

func TestElasticWidths_TraceWidthsThatFitAreKept(t *testing.T) {
	trace := []int{16, 8, 1, 4, 12}
	if got := elasticWidths(trace, 41); !slices.Equal(got, trace) {
		t.Fatalf("widths %v on 41 GPUs, want the trace's %v", got, trace)
	}
}

// TestElasticWidths_OversubscribedJobsShareAPowerOfTwoCapAboveTheirFloor
// checks the named properties on many loads: never wider than the trace,
// never below a quarter of it, the cap the largest power of two whose
// max-min widths fit, the same widths whatever the job order.
func TestElasticWidths_OversubscribedJobsShareAPowerOfTwoCapAboveTheirFloor(t *testing.T) {
	pool := []int{1, 4, 6, 8, 12, 16, 24, 32, 48}
	for n := 1; n <= 40; n++ {
		trace := make([]int, n)
		for i := range trace {
			trace[i] = pool[(i*7+n)%len(pool)]
		}
		for _, gpus := range []int{16, 64, 128} {
			got := elasticWidths(trace, gpus)
			sum := 0
			for _, w := range trace {
				sum += w
			}
			c := elasticCap(trace, gpus)
			switch {
			case sum <= gpus:
				if !slices.Equal(got, trace) {
					t.Fatalf("n=%d G=%d: trace widths %v fit but got %v", n, gpus, trace, got)
				}
				continue
			case c&(c-1) != 0 || (c > 1 && capped(trace, c) > gpus):
				t.Fatalf("n=%d G=%d: cap %d is no power of two that fits", n, gpus, c)
			case 2*c < slices.Max(trace) && capped(trace, 2*c) <= gpus:
				t.Fatalf("n=%d G=%d: cap %d is not the largest that fits", n, gpus, c)
			}
			for i, w := range got {
				floor := (trace[i] + MinWidthFraction - 1) / MinWidthFraction
				if w > trace[i] || w < floor || w != max(min(trace[i], c), floor) {
					t.Fatalf("n=%d G=%d cap %d: job %d of width %d gets %d", n, gpus, c, i, trace[i], w)
				}
			}
			rev := slices.Clone(trace)
			slices.Reverse(rev)
			back := elasticWidths(rev, gpus)
			slices.Reverse(back)
			if !slices.Equal(back, got) {
				t.Fatalf("n=%d G=%d: widths depend on job order: %v vs %v", n, gpus, got, back)
			}
		}
	}
	// 64 GPUs, five 16-wide jobs and four 1-wide: the cap is 8 (5·8+4 = 44;
	// 16 would need 84).
	if got := elasticWidths([]int{16, 16, 16, 16, 16, 1, 1, 1, 1}, 64); !slices.Equal(got, []int{8, 8, 8, 8, 8, 1, 1, 1, 1}) {
		t.Fatalf("widths %v", got)
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
// cluster run narrower, all at once; in trace mode they keep their widths.
func TestProject_AgentModeShrinksJobsOnlyWhenOversubscribed(t *testing.T) {
	apps := mustApps(t)
	nodes := topology.Uniform(2, 4)
	rows := []WorkloadRow{{"cifar10-0", 0, "cifar10", 8, 512}, {"cifar10-1", 0, "cifar10", 8, 512}, {"cifar10-2", 0, "cifar10", 8, 512}}
	for _, c := range []struct {
		batch string
		rows  []WorkloadRow
		want  int // width of every running job at the first round
		runs  int
	}{
		{BatchAgent, rows[:1], 8, 1},
		{BatchAgent, rows, 2, 3},
		{BatchTrace, rows, 8, 1},
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
				runs := 0
				for _, j := range active {
					if len(j.Alloc) > 0 {
						runs++
						if len(j.Alloc) != c.want {
							t.Errorf("%s, %d jobs: %s runs on %d GPUs, want %d", c.batch, len(c.rows), j.Name, len(j.Alloc), c.want)
						}
					}
				}
				if runs != c.runs {
					t.Errorf("%s, %d jobs: %d run at first, want %d", c.batch, len(c.rows), runs, c.runs)
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
