package market

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestSolve_SharedCurvesOfEqualJobsKeepTheResult: on problems in which
// most jobs are copies of a few (equal but for the ID; a few copies with
// one field or the sign of a zero changed), under both fairness rules and
// random settings, with every key's hash colliding, and with the search
// for copies stopped or continued after a few jobs, Solve gives the
// same Result, every float's bits
// included, with the curves of equal jobs shared as with every job's own.
func TestSolve_SharedCurvesOfEqualJobsKeepTheResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 12))
	shared := 0
	hash, probe := twinHash, repProbe
	defer func() { twinHash, repProbe = hash, probe }()
	for trial := range 120 {
		twinHash, repProbe = hash, probe
		if trial%4 == 3 { // every key collides: equal keys are told apart field by field
			twinHash = func(twinKey) uint64 { return 7 }
		}
		if trial%3 == 2 { // a short probe: the table is rebuilt, or the search stops
			repProbe = 1 + rng.IntN(12)
		}
		gpus := 4 + rng.IntN(40)
		n := 5 + rng.IntN(60)
		round, rounds := rng.IntN(30), 5+rng.IntN(20)
		var kinds []Job
		for range 1 + rng.IntN(5) {
			kinds = append(kinds, randomInternalJob(rng, min(4, gpus), round, rounds, n, gpus))
		}
		p := Problem{GPUs: gpus, Round: round, Rounds: rounds, RoundSeconds: 120}
		for c := range n {
			j := kinds[rng.IntN(len(kinds))]
			switch rng.IntN(12) {
			case 0:
				j.Remaining = math.Nextafter(j.Remaining, math.Inf(1))
			case 1:
				j.FairFinish *= 1.5
			case 2:
				j.RemainingHigh = j.Remaining * 1.3
			case 3:
				j.RemainingCap = j.Remaining * 0.2
			case 4:
				if j.Progress == 0 {
					j.Progress = math.Copysign(0, -1)
				}
			}
			j.ID = fmt.Sprintf("j%03d", c)
			p.Jobs = append(p.Jobs, j)
		}
		s := randomInternalSettings(rng)
		s.Fairness = Fairness(rng.IntN(2))
		shareCurves = false
		want, errWant := Solve(p, s)
		shareCurves = true
		got, errGot := Solve(p, s)
		if (errGot != nil) != (errWant != nil) {
			t.Fatalf("trial %d: errors %v and %v", trial, errGot, errWant)
		}
		if !reflect.DeepEqual(got, want) || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Fatalf("trial %d: shared curves give\n%+v\nown curves give\n%+v", trial, got, want)
		}
		in := newInstance(&p, s)
		for c, r := range in.reps(make([]float64, n)) {
			if int(r) != c {
				shared++
			}
		}
	}
	if shared < 500 {
		t.Fatalf("only %d jobs shared a representative's curves: the sharing is not exercised", shared)
	}
}

func randomInternalJob(rng *rand.Rand, maxWidth, round, rounds, n, gpus int) Job {
	epochs := float64(1 + rng.IntN(30))
	progress := 0.0
	if rng.IntN(3) > 0 {
		progress = float64(rng.IntN(int(epochs) + 1))
	}
	d := 20 + 400*rng.Float64()
	remaining := d * (epochs - progress) * (0.7 + 0.6*rng.Float64())
	share := math.Min(1, float64(gpus)/float64(n))
	finish := (120*float64(round+rounds) + remaining/share) * (0.6 + 1.2*rng.Float64())
	return Job{Workers: 1 + rng.IntN(maxWidth), Epochs: epochs, Progress: progress,
		EpochSeconds: d, Remaining: remaining, FairFinish: math.Max(finish, 1)}
}

func randomInternalSettings(rng *rand.Rand) *Settings {
	s := DefaultSettings()
	s.K = []float64{0, 1e-3, 0.1, 10}[rng.IntN(4)]
	s.Lambda = []float64{0, 5, 12}[rng.IntN(3)]
	s.ExactLog = rng.IntN(5) == 0
	s.Gap = 0
	return s
}

// TestReps_AreEarlierEqualJobs: whatever the hash (colliding for every
// key, so that probes give up) and the probe length, each job's
// representative is itself or an earlier job with the same key, itself a
// representative; and with a working hash every copy among the first
// jobs finds the first of its key.
func TestReps_AreEarlierEqualJobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 15))
	hash := twinHash
	defer func() { twinHash = hash }()
	for trial := range 40 {
		twinHash = hash
		if trial%2 == 1 {
			twinHash = func(twinKey) uint64 { return 3 }
		}
		n := 50 + rng.IntN(3000)
		kinds := 1 + rng.IntN(200)
		p := Problem{GPUs: 64, Rounds: 20, RoundSeconds: 120}
		for c := range n {
			k := rng.IntN(kinds)
			p.Jobs = append(p.Jobs, Job{ID: fmt.Sprintf("j%05d", c), Workers: 1 + k%3, Epochs: float64(10 + k), Progress: 1,
				EpochSeconds: 100, Remaining: float64(1000 + k), FairFinish: 5000})
		}
		in := newInstance(&p, DefaultSettings())
		w := make([]float64, n)
		for c := range w {
			w[c] = 1
		}
		rep := in.reps(w)
		first := map[twinKey]int{}
		for c, r := range rep {
			k := in.twinKey(c, w)
			if int(r) > c || int(rep[r]) != int(r) || in.twinKey(int(r), w) != k {
				t.Fatalf("trial %d: job %d has representative %d", trial, c, r)
			}
			f, seen := first[k]
			if !seen {
				first[k] = c
				f = c
			}
			if trial%2 == 0 && c < repProbe && int(r) != f {
				t.Fatalf("trial %d: job %d has representative %d, the first of its key is %d", trial, c, r, f)
			}
		}
	}
}

// TestTwinTable_FindDoesNotAllocate: the search for a job's representative
// runs once per job of every solve, so it must not allocate (a key that
// escaped to the heap once made a 900-job solve's allocations 660 → 2,477).
func TestTwinTable_FindDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	in := &instance{}
	weights := make([]float64, 256)
	for c := range weights {
		in.jobs = append(in.jobs, randomInternalJob(rng, 4, 0, 10, len(weights), 16))
		weights[c] = 1
	}
	var tab twinTable
	tab.init(2 * len(weights))
	c := 0
	allocs := testing.AllocsPerRun(1000, func() {
		tab.find(in, weights, c%len(weights))
		c++
	})
	if allocs != 0 {
		t.Fatalf("twinTable.find makes %.1f allocations a call, want 0", allocs)
	}
}
