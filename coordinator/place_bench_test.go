package coordinator

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// benchRound builds a round of 8,000 active jobs (widths 1-8, a few
// resident) on nodes: the previous round placed a plan filling the cluster;
// this round's plan keeps 80 % of those jobs and fills the GPU count with
// others, so that jobs keep devices, new gangs fit around them and some
// need a repack or a repair.
func benchRound(nodes []topology.Node, n int, residents bool) (*Core, []*job, []*job) {
	rng := rand.New(rand.NewPCG(42, 42))
	total := topology.Cluster{Nodes: nodes}.GPUs()
	c, err := NewCore(Config{Cluster: topology.Cluster{Nodes: nodes}}, gavelForTest())
	if err != nil {
		panic(err)
	}
	jobs := make([]*job, n)
	for i := range jobs {
		j := &job{state: Active, leaseRound: -1}
		j.view.ID, j.view.Workers = "job-"+strconv.Itoa(i), []int{1, 1, 1, 2, 2, 4, 8}[rng.IntN(7)]
		if residents && rng.IntN(50) == 0 {
			j.node, j.view.Workers = nodes[rng.IntN(len(nodes))].Name, 1
		}
		jobs[i] = j
	}
	c.active = jobs
	first := fill(rng, nil, jobs, total)
	run, _ := c.placeRun(newPlacer(nodes), first, jobs, &policy.Plan{Run: ids(first)})
	var keep []*job
	for _, j := range run {
		j.devices, j.next, j.leaseRound = j.next, nil, 0
		if rng.IntN(5) > 0 {
			keep = append(keep, j)
		}
	}
	c.round = 1
	return c, jobs, fill(rng, keep, jobs, total)
}

// fill adds jobs in random order to plan while the GPU count allows.
func fill(rng *rand.Rand, plan, jobs []*job, total int) []*job {
	in := map[*job]bool{}
	used := 0
	for _, j := range plan {
		in[j] = true
		used += j.view.Workers
	}
	for _, i := range rng.Perm(len(jobs)) {
		if j := jobs[i]; !in[j] && used+j.view.Workers <= total {
			plan = append(plan, j)
			in[j] = true
			used += j.view.Workers
		}
	}
	return plan
}

func benchmarkPlace(b *testing.B, nodes []topology.Node, residents bool) {
	c, jobs, plan := benchRound(nodes, 8000, residents)
	p := &policy.Plan{Run: ids(plan)}
	b.ReportAllocs()
	b.ResetTimer()
	repaired := 0
	for range b.N {
		pl := newPlacer(nodes)
		run, np := c.placeRun(pl, plan, jobs, p)
		for _, j := range run {
			_ = pl.ids(j.next) // the leases' Workers
		}
		if np != p {
			repaired++
		}
	}
	b.ReportMetric(float64(len(plan)), "planned-jobs")
	b.ReportMetric(float64(repaired)/float64(b.N), "repaired")
}

// BenchmarkPlace_1024x8Nodes_8000Jobs: placement of one round (goal: under
// 20 ms) at 1,024 nodes of 8 GPUs and 8,000 active jobs, about 3,000 of
// them planned, 80 % keeping their devices.
func BenchmarkPlace_1024x8Nodes_8000Jobs(b *testing.B) {
	benchmarkPlace(b, topology.Uniform(1024, 8).Nodes, false)
}

// BenchmarkPlaceRepair_1024x8Nodes_8000Jobs: the same with 2 % of the jobs
// resident on a node, so that plans need repair (repacks, drops and a
// back-fill over the 8,000 jobs).
func BenchmarkPlaceRepair_1024x8Nodes_8000Jobs(b *testing.B) {
	benchmarkPlace(b, topology.Uniform(1024, 8).Nodes, true)
}

// BenchmarkTick_1024x8Nodes_8000Jobs: a whole round boundary (settling,
// Gavel's Gandiva-Fair dispatch, placement, leases) at 1,024 nodes of 8
// GPUs and 8,000 active jobs of widths 1-8.
func BenchmarkTick_1024x8Nodes_8000Jobs(b *testing.B) {
	p, err := policy.New("gandiva_fair", policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	c := coreWithJobs(b, topology.Uniform(1024, 8), p, 8000, 100_000_000, func() int { return []int{1, 1, 1, 2, 2, 4, 8}[rng.IntN(7)] })
	now := 0.0
	if _, err := c.Tick(now); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now += 120
		if _, err := c.Tick(now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlaceAfterHalfTheNodesLeft_1024x8Nodes_8000Jobs: the worst
// repair: a plan made for 1,024 nodes placed on the 512 left (dynamic
// membership), so half the planned GPUs find no place and every placement
// is tried.
func BenchmarkPlaceAfterHalfTheNodesLeft_1024x8Nodes_8000Jobs(b *testing.B) {
	nodes := topology.Uniform(1024, 8).Nodes
	c, jobs, plan := benchRound(nodes, 8000, false)
	left := nodes[:512]
	p := &policy.Plan{Run: ids(plan)}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c.placeRun(newPlacer(left), plan, jobs, p)
	}
}

// BenchmarkBeginTick_FirstRoundOf10000Jobs: the loop's part of the first
// round of the 10,000-job load test: BeginTick admitting 10,000 registered
// jobs at once on 320 nodes of 8 GPUs (the solve and the close excluded).
func BenchmarkBeginTick_FirstRoundOf10000Jobs(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		p, err := policy.New("shockwave", policy.Options{})
		if err != nil {
			b.Fatal(err)
		}
		c := coreWithJobs(b, topology.Uniform(320, 8), p, 10_000, 100_000, func() int { return 1 })
		b.StartTimer()
		if _, err := c.BeginTick(0, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// coreWithJobs is a Core on cluster with n ResNet-18 jobs registered at
// time 0, each of total steps and width() workers.
func coreWithJobs(b testing.TB, cluster topology.Cluster, p policy.Policy, n int, steps int64, width func() int) *Core {
	b.Helper()
	c, err := NewCore(Config{Cluster: cluster, MaxFailedLeases: -1}, p)
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		r := &protocol.Register{V: protocol.Version, Job: "job-" + strconv.Itoa(i), Model: "ResNet-18",
			Workers: width(), BatchSize: 32, DatasetSize: 50000, TotalSteps: steps, Throughput: 10}
		if err := c.Register(0, r); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// BenchmarkEndTick_10000ResidentsOn320x8Nodes: the loop's close of a round
// of the 10,000-job load test's shape with resident jobs (each bound to
// one of 320 nodes of 8 GPUs, widths 1 and 2; the Shockwave policy):
// placement, the repair of a plan that does not know where the jobs live,
// and the leases. The solve and the granted jobs' progress between rounds
// are not timed.
func BenchmarkEndTick_10000ResidentsOn320x8Nodes(b *testing.B) {
	c := residentsCore(b)
	now, seq, done := 0.0, map[string]uint64{}, map[string]int64{}
	var last *Round
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		if last != nil {
			for _, l := range last.Leases {
				if l.Action != protocol.Run {
					continue
				}
				seq[l.Job]++
				done[l.Job] += 50
				e := protocol.Event{V: protocol.Version, Job: l.Job, Type: protocol.EventProgress, Seq: seq[l.Job], Steps: 50, Elapsed: 5,
					Throughput: 10, StepsDone: done[l.Job], TotalSteps: 200_000, BatchSize: 32}
				if _, err := c.Deliver(now+5, &e); err != nil {
					b.Fatal(err)
				}
			}
		}
		now += 60
		t, err := c.BeginTick(now, nil)
		if err != nil {
			b.Fatal(err)
		}
		plan, solveErr := t.Solve()
		b.StartTimer()
		if last, err = c.EndTick(plan, solveErr); err != nil {
			b.Fatal(err)
		}
	}
}

// residentsCore is a Core of the load test's shape: 10,000 ResNet-18 jobs
// of widths 1 and 2, each resident on one of 320 nodes of 8 GPUs, under
// the Shockwave policy.
func residentsCore(b *testing.B) *Core {
	b.Helper()
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cl := topology.Uniform(320, 8)
	c, err := NewCore(Config{Cluster: cl, MaxFailedLeases: -1}, p)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		r := &protocol.Register{V: protocol.Version, Job: "job-" + strconv.Itoa(i), Model: "ResNet-18",
			Workers: 1 + i%2, BatchSize: 32, DatasetSize: 50000, TotalSteps: 200_000, Throughput: 10, Node: cl.Nodes[i%320].Name}
		if err := c.Register(0, r); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// BenchmarkJobTable_10000Jobs: the job table the service copies on the
// loop after every round for its summary (handlers.go), at the load
// test's shape after one round (about 1,900 jobs holding GPUs): into a
// fresh slice (Jobs, as for a status reply) and into the buffer of an
// earlier round (AppendJobs, as for the summary).
func BenchmarkJobTable_10000Jobs(b *testing.B) {
	c := residentsCore(b)
	if _, err := c.Tick(60); err != nil {
		b.Fatal(err)
	}
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_ = c.Jobs()
		}
	})
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		var table []JobStatus
		for range b.N {
			table = c.AppendJobs(table[:0])
		}
	})
}
