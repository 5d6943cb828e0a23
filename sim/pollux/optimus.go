package pollux

import (
	"fmt"
	"math"
	"slices"
)

// Optimus is Optimus+Oracle+TunedJobs (spec §6.2): a greedy on the
// marginal reduction of remaining time, predicted from the true throughput
// traces at the workload's fixed batch size, with most-free-node placement.
type Optimus struct {
	t      []float64 // scratch: predicted step time by replica count
	placed []int
}

// NewOptimus returns the policy.
func NewOptimus() *Optimus { return &Optimus{} }

// Name implements Policy.
func (*Optimus) Name() string { return "optimus" }

// SetupOptimus fixes a job's batch size to the trace's (spec §3.1).
func SetupOptimus(j *Job) { j.TargetBatch = j.BatchSize }

func optimusMaxReplicas(j *Job) int {
	if j.App.Name == "ncf" {
		return 1
	}
	return j.TargetBatch / j.App.MinLocal
}

// optimusRemaining is the remaining optimiser steps at the fixed batch size.
func optimusRemaining(j *Job) float64 {
	app := j.App
	if app.MaxEpochs-1 <= j.Epoch {
		return 1
	}
	b := float64(j.TargetBatch)
	return app.Iteration(b, app.MaxEpochs-1) - app.Iteration(b, j.Epoch)
}

// optimusStepTime is the oracle's seconds per step on r GPUs packed into
// nodes of four.
func optimusStepTime(j *Job, r int) (float64, error) {
	app := j.App
	var pl [17]int
	k := 0
	for left := r; left > 0; left -= 4 {
		pl[k] = min(left, 4)
		k++
	}
	b := float64(j.TargetBatch)
	local := math.Ceil(b/float64(r) - eps)
	s := int(math.Ceil(local/float64(app.MaxLocal)-eps)) - 1
	if r == 1 {
		s = max(1, s)
	}
	a := int(math.Ceil(local/float64(s+1) - eps))
	a = min(a, int(float64(app.MaxBsz)/float64(r*(s+1))))
	step, sync, err := app.Throughput(pl[:k], a)
	if err != nil {
		return 0, err
	}
	return step + (step-sync)*float64(s), nil
}

// Allocate implements Policy.
func (o *Optimus) Allocate(now int, active []*Job, cl *Cluster) ([][]int, error) {
	n := len(active)
	reps := make([]int, n)
	gain := make([]float64, n)
	rem := make([]float64, n)
	free := cl.GPUs
	gainOf := func(i int, left int) (float64, error) {
		j := active[i]
		if reps[i]+1 > optimusMaxReplicas(j) || left < 1 {
			return 0, nil
		}
		t0, err := optimusStepTime(j, reps[i])
		if err != nil {
			return 0, err
		}
		t1, err := optimusStepTime(j, reps[i]+1)
		if err != nil {
			return 0, err
		}
		return (t0 - t1) * rem[i], nil
	}
	var err error
	for i, j := range active {
		rem[i] = optimusRemaining(j)
		if free == 0 {
			continue
		}
		reps[i] = 1
		free--
		if gain[i], err = gainOf(i, free); err != nil {
			return nil, fmt.Errorf("optimus: job %s: %w", j.Name, err)
		}
	}
	for free > 0 {
		best := -1
		for i := range gain {
			if gain[i] > 0 && (best < 0 || gain[i] > gain[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		reps[best]++
		if gain[best], err = gainOf(best, free); err != nil {
			return nil, fmt.Errorf("optimus: job %s: %w", active[best].Name, err)
		}
		free--
	}
	return o.place(active, reps, cl)
}

// place keeps allocations of unchanged width and places the others in
// ascending width (stable), most-free node first.
func (o *Optimus) place(active []*Job, reps []int, cl *Cluster) ([][]int, error) {
	allocs := make([][]int, len(active))
	var todo []int
	for i, j := range active {
		if len(j.Alloc) == reps[i] && reps[i] > 0 {
			allocs[i] = j.Alloc
		} else if reps[i] > 0 {
			todo = append(todo, i)
		}
	}
	slices.SortStableFunc(todo, func(a, b int) int { return reps[a] - reps[b] })
	free := freeGPUs(cl, allocs)
	for _, i := range todo {
		if allocs[i] = placeMostFree(free, reps[i]); allocs[i] == nil {
			return nil, fmt.Errorf("optimus: no room for job %s", active[i].Name)
		}
	}
	return allocs, nil
}
