package pollux

import (
	"cmp"
	"math"
	"slices"
)

// widthJob is what the elastic width rule knows of one job, all of it
// from the job's own reports (its AdaptDL agent's fitted model and its
// progress): slow[w], its goodput at its trace width over its goodput on w
// GPUs (w = 1 … trace width; +Inf where the model gives none), and, once
// it has a fitted model, run, the seconds the whole job takes at its
// trace width by that model, and left, the share of its work still to do.
type widthJob struct {
	slow []float64
	run  float64 // 0: unknown (no fitted model yet)
	left float64
}

// trace is the job's trace width, the widest it runs.
func (j widthJob) trace() int { return len(j.slow) - 1 }

// remaining is the job's forecast remaining seconds on w GPUs (+Inf when
// unknown).
func (j widthJob) remaining(w int) float64 {
	if j.run == 0 || w <= 0 || w >= len(j.slow) {
		return math.Inf(1)
	}
	return j.left * j.run * j.slow[w]
}

// newWidthJob reads j's reports for the width rule, on packed placements
// over nodes of nodeGPUs GPUs. Before the job has a fitted model its
// slowdown is linear in the width (the prior) and its remaining time is
// unknown.
func newWidthJob(j *Job, nodeGPUs int) widthJob {
	k := j.Replicas
	wj := widthJob{slow: make([]float64, k+1), left: 1}
	wj.slow[0] = math.Inf(1)
	ref := 0.0
	if j.Perf != nil {
		ref = modelGoodput(j, k, nodeGPUs)
	}
	if !(ref > 0) {
		for w := 1; w <= k; w++ {
			wj.slow[w] = float64(k) / float64(w)
		}
		return wj
	}
	for w := 1; w <= k; w++ {
		wj.slow[w] = math.Inf(1)
		if g := modelGoodput(j, w, nodeGPUs); g > 0 {
			wj.slow[w] = ref / g
		}
	}
	total := j.App.ProgressToFinish()
	wj.run = total / (ref / float64(j.App.InitBsz)) // progress per second is goodput / init batch
	wj.left = math.Max(0, total-j.Progress) / total
	return wj
}

// modelGoodput is j's goodput on r GPUs packed on nodes of nodeGPUs by its
// fitted model, at the batch size its agent would pick there (or its fixed
// one).
func modelGoodput(j *Job, r, nodeGPUs int) float64 {
	n := (r + nodeGPUs - 1) / nodeGPUs
	g := j.Goodput()
	if j.TargetBatch == 0 {
		best, _, _ := g.Optimize(n, r)
		return best
	}
	a, s := fixedBatch(j.App, j.TargetBatch, r)
	if a = min(a, int(float64(j.App.MaxBsz)/float64(r*(s+1)))); a < 1 {
		return 0
	}
	return g.Eval(n, r, a, s)
}

// step is the width in (from, upto] that lowers j's slowdown the most per
// GPU added, and that drop per GPU; to is 0 when no width lowers it. A
// step may span several GPUs, so a job whose model dips at a node boundary
// can still grow past it.
func (j widthJob) step(from, upto int) (to int, drop float64) {
	for t := from + 1; t <= upto; t++ {
		if math.IsInf(j.slow[t], 1) {
			continue
		}
		d := math.MaxFloat64
		if !math.IsInf(j.slow[from], 1) {
			d = (j.slow[from] - j.slow[t]) / float64(t-from)
		}
		if d > drop {
			to, drop = t, d
		}
	}
	return to, drop
}

// better reports whether growing job a (drop per GPU da, remaining ra)
// comes before growing job b: a job with no forecast yet (a new job) first,
// then the larger drop of slowdown per GPU per second of remaining work.
func better(da, ra, db, rb float64) bool {
	ia, ib := math.IsInf(ra, 1), math.IsInf(rb, 1)
	if ia != ib {
		return ia
	}
	if ia {
		return da > db
	}
	return da/ra > db/rb
}

// grow hands out the GPUs left of gpus, a step at a time, to the job
// better ranks first among those allowed to grow, never past its trace
// width. It returns the widths' sum.
func grow(jobs []widthJob, w []int, sum, gpus int, allowed func(i, to int) bool) int {
	for sum < gpus {
		best, bestTo, bestDrop, bestRem := -1, 0, 0.0, 0.0
		for i, j := range jobs {
			to, drop := j.step(w[i], min(j.trace(), w[i]+gpus-sum))
			if to == 0 || !allowed(i, to) {
				continue
			}
			if rem := j.remaining(w[i]); best < 0 || better(drop, rem, bestDrop, bestRem) {
				best, bestTo, bestDrop, bestRem = i, to, drop, rem
			}
		}
		if best < 0 {
			break
		}
		sum += bestTo - w[best]
		w[best] = bestTo
	}
	return sum
}

// elasticWidths returns each job's width for the next round when jobs can
// run narrower than their trace width (BatchAgent: the job re-picks its
// batch size for the GPUs it holds); cur is each job's current width (0:
// not running). While the trace widths fit the cluster nothing shrinks.
// Otherwise every job starts from one GPU and the others go, a step at a
// time, first to jobs with no forecast yet, then to the job whose reported
// slowdown falls the most per GPU per second of its remaining work: the
// GPUs go where they speed jobs up the most, and short jobs run wide and
// are done. That choice is then made restart-aware (keepWidths). With more
// jobs than GPUs every job gets one GPU and the policy time-slices them.
func elasticWidths(jobs []widthJob, cur []int, gpus int) []int {
	w := make([]int, len(jobs))
	want := 0
	for i, j := range jobs {
		w[i] = j.trace()
		want += w[i]
	}
	if want <= gpus {
		return w
	}
	for i := range w {
		w[i] = 1
	}
	grow(jobs, w, len(jobs), gpus, func(int, int) bool { return true })
	return keepWidths(jobs, w, cur, gpus)
}

// keepWidths makes the widths want restart-aware, as every width change
// restarts a running job (RestartSeconds). A running job with a forecast
// grows only when its remaining time falls by more than a restart; a job that
// would shrink keeps its width while the GPUs so spared cover it, the
// largest loss of shrinking first; the GPUs still free go, as in
// elasticWidths, to jobs that change width anyway or start.
func keepWidths(jobs []widthJob, want, cur []int, gpus int) []int {
	w := slices.Clone(want)
	sum := 0
	var shrink []int
	for i, j := range jobs {
		c := cur[i]
		switch {
		case c > 0 && w[i] > c && j.run > 0 && !(j.remaining(c)-j.remaining(w[i]) > RestartSeconds):
			w[i] = c
		case c > w[i]:
			shrink = append(shrink, i)
		}
		sum += w[i]
	}
	loss := func(i int) float64 { return jobs[i].remaining(w[i]) - jobs[i].remaining(cur[i]) }
	slices.SortStableFunc(shrink, func(a, b int) int { return cmp.Compare(loss(b), loss(a)) })
	for _, i := range shrink {
		if d := cur[i] - w[i]; sum+d <= gpus {
			sum += d
			w[i] = cur[i]
		}
	}
	grow(jobs, w, sum, gpus, func(i, _ int) bool { return cur[i] == 0 || w[i] != cur[i] })
	return w
}

// placePacked places want GPUs on the one node with the fewest free GPUs
// that still holds them all (best fit), so that narrow elastic jobs do not
// spread over nodes; a job no node holds falls back to placeMostFree.
func placePacked(free []int, want int) []int {
	best := -1
	for n, f := range free {
		if f >= want && (best < 0 || f < free[best]) {
			best = n
		}
	}
	if best < 0 {
		return placeMostFree(free, want)
	}
	free[best] -= want
	out := make([]int, want)
	for k := range out {
		out[k] = best
	}
	return out
}
