package sdk_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
	"github.com/shockwave-sched/shockwave/topology"
)

// toyGrad is rank's gradient at step k of a toy regression: deterministic
// in (w, k, rank), so that a run's final weight depends on every rank
// doing the same steps in the same order.
func toyGrad(w float64, k int64, rank int) float64 {
	x := float64((k*7+int64(rank)*13)%17) / 17
	y := 3*x + 0.5
	return 2 * (w*x - y) * x
}

// toyReference is the weight after steps uninterrupted steps of world ranks.
func toyReference(world int, steps int64) float64 {
	w := 0.0
	for k := range steps {
		s := 0.0
		for r := range world {
			s += toyGrad(w, k, r)
		}
		w -= 0.05 * s / float64(world)
	}
	return w
}

// rankRun is what one in-process rank saw.
type rankRun struct {
	stops   []int64 // steps done at each suspension
	resumes []int64
	devices [][]protocol.NodeDevices
	w       float64
	err     error
}

func runToyRank(ctx context.Context, job *sdk.Job, coll *collective, res *rankRun, stepSleep time.Duration) {
	w := 0.0
	k := int64(-1)
	src := sdk.SourceFunc[int](func(context.Context) (int, error) { return 0, nil })
	for _, err := range sdk.Steps(ctx, job, src) {
		if err != nil {
			res.err = err
			break
		}
		if k < 0 {
			k = job.StepsDone()
		}
		s, err := coll.allReduce(job.Rank(), k, toyGrad(w, k, job.Rank()))
		if err != nil {
			res.err = err
			break
		}
		w -= 0.05 * s / float64(job.WorldSize())
		k++
		if stepSleep > 0 {
			time.Sleep(stepSleep)
		}
	}
	res.w = w
}

// TestRanks_EveryRankStopsAndResumesAtTheSameStep runs a 4-rank job whose
// ranks all-reduce every step (an in-process collective that fails when
// ranks disagree on the step), suspends and resumes it at random moments,
// and checks that every rank stopped at the same steps, resumed with the
// granted devices, and computed the weights of an uninterrupted run.
func TestRanks_EveryRankStopsAndResumesAtTheSameStep(t *testing.T) {
	const world, steps = 4, 3000
	c := sdktest.Start(t, sdktest.Config{GPUs: 4, Round: time.Hour})
	var suspended atomic.Int64
	runs := make([]rankRun, world)
	jobs := registerRanks(t, world, func(r int) []sdk.Option {
		res := &runs[r]
		return append(rankOptions(c, "toy4", r, world, steps),
			sdk.WithOnSuspend(func(ctx context.Context, l protocol.Lease) error {
				res.stops = append(res.stops, jobsStepsDone(ctx))
				suspended.Add(1)
				return nil
			}),
			sdk.WithOnResume(func(ctx context.Context, l protocol.Lease) error {
				res.devices = append(res.devices, sdk.LeaseDevices(l))
				return nil
			}))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coll := newCollective(world, 10*time.Second)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() { runToyRank(withJob(ctx, jobs[r]), jobs[r], coll, &runs[r], time.Millisecond) })
	}
	l := newLeaser(t, c, "toy4")
	devices := []protocol.NodeDevices{{Node: "node-a", Devices: []int{0, 1}}, {Node: "node-b", Devices: []int{2, 3}}}
	l.runOn(devices, 0, 1, 2, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	cycles := 0
	for !jobs[0].Done() && ctx.Err() == nil {
		// A SUSPEND before the ranks resumed stops nothing: wait until
		// every rank trains again.
		if !waitFor(ctx, func() bool { return allRunning(jobs) || jobs[0].Done() }) {
			break
		}
		time.Sleep(time.Duration(2+rng.IntN(20)) * time.Millisecond)
		before := suspended.Load()
		l.suspend()
		ok := waitFor(ctx, func() bool { return suspended.Load() >= before+world || jobs[0].Done() })
		if !ok {
			break
		}
		cycles++
		l.runOn(devices, 0, 1, 2, 3)
	}
	wg.Wait()
	want := toyReference(world, steps)
	for r := range world {
		if runs[r].err != nil {
			t.Errorf("rank %d: %v", r, runs[r].err)
		}
		if math.Float64bits(runs[r].w) != math.Float64bits(want) {
			t.Errorf("rank %d: final weight %v, uninterrupted run %v", r, runs[r].w, want)
		}
		if !slices.Equal(runs[r].stops, runs[0].stops) {
			t.Errorf("rank %d stopped at steps %v, rank 0 at %v", r, runs[r].stops, runs[0].stops)
		}
		for _, d := range runs[r].devices {
			if len(d) != 2 || d[1].Node != "node-b" || !slices.Equal(d[1].Devices, []int{2, 3}) {
				t.Errorf("rank %d resumed with devices %v", r, d)
				break
			}
		}
	}
	if cycles < 20 {
		t.Errorf("only %d suspensions before the job finished", cycles)
	}
	t.Logf("%d suspensions; stop steps %v", cycles, runs[0].stops)
}

func allRunning(jobs []*sdk.Job) bool {
	for _, j := range jobs {
		if j.LeaseState() != sdk.Running {
			return false
		}
	}
	return true
}

type jobKey struct{}

func withJob(ctx context.Context, j *sdk.Job) context.Context {
	return context.WithValue(ctx, jobKey{}, j)
}

func jobsStepsDone(ctx context.Context) int64 { return ctx.Value(jobKey{}).(*sdk.Job).StepsDone() }

func waitFor(ctx context.Context, cond func() bool) bool {
	for !cond() {
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// TestRanks_ASilentRankStopsTheOthersWithErrRankLost cuts one rank's
// connection without a word (as a killed process would) and checks that
// the others, training on, end with ErrRankLost within the rank timeout
// rather than running on or hanging.
func TestRanks_ASilentRankStopsTheOthersWithErrRankLost(t *testing.T) {
	const world = 3
	c := sdktest.Start(t, sdktest.Config{GPUs: 4, Round: time.Hour})
	jobs := registerRanks(t, world, func(r int) []sdk.Option {
		return append(rankOptions(c, "lost3", r, world, 1<<20), sdk.WithRankTimeout(500*time.Millisecond, 10*time.Second))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := newLeaser(t, c, "lost3")
	l.run(0, 1, 2)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			j := jobs[r]
			n := 0
			for _, err := range sdk.Steps(ctx, j, sdk.SourceFunc[int](func(context.Context) (int, error) { return 0, nil })) {
				if err != nil {
					errs[r] = err
					return
				}
				if n++; r == 2 && n == 50 {
					j.Conn().Close() // silent: no message, no more heartbeats
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the ranks ran until the test's deadline")
	}
	for r := range world - 1 {
		if !errors.Is(errs[r], sdk.ErrRankLost) {
			t.Errorf("rank %d: %v, want ErrRankLost", r, errs[r])
		} else {
			t.Logf("rank %d: %v", r, errs[r])
		}
	}
}

// TestRanks_AResidentJobTrainsOnTheDevicesTheCoordinatorGrantsOnItsNode
// runs a 2-rank job resident on node-1 of a 2×2 cluster under the
// coordinator's own rounds (a job resident on node-0 runs beside it): every
// rank's grant names node-1's two devices, and the weights match an
// uninterrupted run.
func TestRanks_AResidentJobTrainsOnTheDevicesTheCoordinatorGrantsOnItsNode(t *testing.T) {
	const world, steps = 2, 200
	c := sdktest.Start(t, sdktest.Config{Cluster: topology.Uniform(2, 2), Round: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	other, err := sdk.Register(ctx, sdk.WithURL(c.URL()), sdk.WithJobID("other"), sdk.WithModel("other"), sdk.WithBatchSize(8),
		sdk.WithDatasetSize(1<<20), sdk.WithTotalSteps(1<<20), sdk.WithWorkers(2), sdk.WithNode("node-0"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var otherDevices atomic.Pointer[[]protocol.NodeDevices]
	go func() {
		for _, err := range sdk.Steps(ctx, other, sdk.SourceFunc[int](func(context.Context) (int, error) {
			time.Sleep(5 * time.Millisecond)
			return 0, nil
		})) {
			if err != nil {
				return
			}
			d := other.Devices()
			otherDevices.Store(&d)
		}
	}()
	runs := make([]rankRun, world)
	jobs := registerRanks(t, world, func(r int) []sdk.Option {
		return append(rankOptions(c, "resident", r, world, steps), sdk.WithNode("node-1"), sdk.WithVisibleDevices(0, 1))
	})
	coll := newCollective(world, 20*time.Second)
	var wg sync.WaitGroup
	grants := make([][]protocol.NodeDevices, world)
	for r := range world {
		wg.Go(func() {
			j := jobs[r]
			w, k := 0.0, int64(-1)
			for _, err := range sdk.Steps(ctx, j, sdk.SourceFunc[int](func(context.Context) (int, error) { return 0, nil })) {
				if err != nil {
					runs[r].err = err
					return
				}
				if k < 0 {
					k, grants[r] = j.StepsDone(), j.Devices()
				}
				s, err := coll.allReduce(r, k, toyGrad(w, k, r))
				if err != nil {
					runs[r].err = err
					return
				}
				w -= 0.05 * s / world
				k++
				time.Sleep(2 * time.Millisecond)
			}
			runs[r].w = w
		})
	}
	wg.Wait()
	want := toyReference(world, steps)
	for r := range world {
		if runs[r].err != nil {
			t.Fatalf("rank %d: %v", r, runs[r].err)
		}
		if math.Float64bits(runs[r].w) != math.Float64bits(want) {
			t.Errorf("rank %d: final weight %v, uninterrupted run %v", r, runs[r].w, want)
		}
		if g := grants[r]; len(g) != 1 || g[0].Node != "node-1" || len(g[0].Devices) != 2 {
			t.Errorf("rank %d trained on %v, want node-1's two devices", r, g)
		}
	}
	if d := otherDevices.Load(); d == nil || len(*d) != 1 || (*d)[0].Node != "node-0" {
		t.Errorf("the job resident on node-0 trained on %v", d)
	}
	t.Logf("grants: ranks %v, other job %v", grants, *otherDevices.Load())
}

// TestRanks_AForgedRank0OrGarbageOnTheRanksSubjectNeverHangsTheJob
// publishes, as a process holding the job's credentials could, garbage and
// then a well-formed message of a second "rank 0" on the job's ranks
// subject: the garbage is ignored (the job trains on), the impostor breaks
// the agreement, and every rank ends with ErrRankLost instead of following
// it or hanging.
func TestRanks_AForgedRank0OrGarbageOnTheRanksSubjectNeverHangsTheJob(t *testing.T) {
	const world = 2
	c := sdktest.Start(t, sdktest.Config{GPUs: 2, Round: time.Hour})
	jobs := registerRanks(t, world, func(r int) []sdk.Option { return rankOptions(c, "forged", r, world, 1<<20) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := newLeaser(t, c, "forged")
	wait := trainRanks(ctx, jobs)
	grantUntil(ctx, l, []int{0, 1}, func() bool { return allRunning(jobs) })
	nc := c.JobClient() // a process holding the job's credentials
	subj := c.Subj.Ranks("forged")
	for _, junk := range []string{"{", `{"v":1}`, `{"v":1,"job":"forged","rank":0,"world":2,"proc":7,"session":0,"gen":9,"step":0,"stop_at":-1}`} {
		if err := nc.Publish(subj, []byte(junk)); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.Flush()
	before := jobs[1].StepsDone()
	waitFor(ctx, func() bool { return jobs[1].StepsDone() > before+20 })
	if jobs[0].LeaseState() != sdk.Running || jobs[1].LeaseState() != sdk.Running {
		t.Fatalf("garbage on the ranks subject stopped the job: %v %v", jobs[0].Reason(), jobs[1].Reason())
	}
	impostor := `{"v":1,"job":"forged","rank":0,"world":2,"proc":12345,"session":99,"gen":50,"step":0,"base":0,"release":1000000,"stop_at":-1,"lease":{"v":1,"job":"forged","round":1,"action":"RUN","workers":[0,1],"start":1,"expiry":9999999999}}`
	if err := nc.Publish(subj, []byte(impostor)); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	errs := wait()
	if ctx.Err() != nil {
		t.Fatal("the ranks ran on until the deadline")
	}
	for r, err := range errs {
		if !errors.Is(err, sdk.ErrRankLost) {
			t.Errorf("rank %d: %v, want ErrRankLost", r, err)
		}
	}
	if n := jobs[1].Stats().BadLeases; n < 2 {
		t.Errorf("rank 1 counted %d bad messages, want the 2 malformed ones", n)
	}
}
