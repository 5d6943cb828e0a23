package policy

import (
	"fmt"
	"sort"
)

// DefaultAlloXAlpha is the fraction of waiting jobs AlloX considers at each
// invocation (the original's α = 0.2, spec §5.3).
const DefaultAlloXAlpha = 0.2

// AlloX is the AlloX baseline as the original adapted it (spec §5.3): a
// non-preemptive min-total-completion-time assignment of jobs to GPUs.
//
//  1. A job whose previous allocation is exactly 1.0 (a 1-GPU job that was
//     placed before) keeps it and holds one GPU; n GPUs remain free.
//     Multi-GPU jobs are placed with 1/w_i ≠ 1, so they are reconsidered
//     every time.
//  2. The other m' jobs are sorted oldest first (a_i = now − arrival,
//     stable) and the first max(⌊α·m'⌋, n) are kept; call their number m″.
//  3. Job i in position r (1 = last) on GPU j costs r·rem_i/θ_i + a_i
//     (θ = 0 counts as 1e-10): an m″×(n·m″) matrix whose column j+(r−1)·n is
//     that slot. The assignment solver picks the slots
//     (LinearSumAssignment, which breaks the matrix's many exact ties as
//     SciPy's linear_sum_assignment did in the original).
//  4. On each GPU the job in the highest position runs first and gets
//     x = 1/w_i.
//
// All other jobs keep their previous allocation, or 0. Like the original,
// this can hand out more than G GPUs in total (a multi-GPU job keeps its
// 1/w_i while it waits), which the round mechanism of spec §3.7 resolves.
// The previous allocation is kept per job ID until Forget.
//
// Fidelity: with the SciPy-faithful tie-breaking of LinearSumAssignment,
// the released 120-job, 32-GPU AlloX run is reproduced exactly (all 271
// round schedules and all 120 JCTs).
type AlloX struct {
	Alpha float64
	prev  map[string]float64
}

// NewAlloX returns the AlloX allocator with α = 0.2.
func NewAlloX() Allocator { return &AlloX{Alpha: DefaultAlloXAlpha, prev: map[string]float64{}} }

// Name is "allox".
func (*AlloX) Name() string { return "allox" }

// Forget drops the job's previous allocation.
func (a *AlloX) Forget(id string) { delete(a.prev, id) }

// Allocate places waiting jobs on the free GPUs (spec §5.3).
func (a *AlloX) Allocate(s *Snapshot) ([]float64, error) {
	if err := checkWidths(s); err != nil {
		return nil, err
	}
	x := make([]float64, len(s.Jobs))
	age := make([]float64, len(s.Jobs))
	var waiting []int
	free := s.GPUs
	for i, j := range s.Jobs {
		x[i] = a.prev[j.ID]
		age[i] = s.Now - j.SubmitTime
		if x[i] == 1.0 {
			free--
		} else {
			waiting = append(waiting, i)
		}
	}
	sort.SliceStable(waiting, func(p, q int) bool { return -age[waiting[p]] < -age[waiting[q]] })
	if keep := max(int(a.Alpha*float64(len(waiting))), free); keep < len(waiting) {
		waiting = waiting[:keep]
	}
	first, err := alloxAssign(s, waiting, age, free)
	if err != nil {
		return nil, err
	}
	for _, i := range first {
		x[i] = 1 / float64(s.Jobs[i].Workers)
	}
	clear(a.prev)
	for i, j := range s.Jobs {
		a.prev[j.ID] = x[i]
	}
	return x, nil
}

// alloxAssign solves the slot assignment and returns, for every GPU that
// got a job, the job (index into s.Jobs) that runs first on it.
func alloxAssign(s *Snapshot, jobs []int, age []float64, gpus int) ([]int, error) {
	if len(jobs) == 0 || gpus <= 0 {
		return nil, nil
	}
	c := &alloxCost{gpus: gpus, p: make([]float64, len(jobs)), age: make([]float64, len(jobs))}
	for k, i := range jobs {
		theta := s.Jobs[i].Throughput
		if theta == 0 {
			theta = 1e-10
		}
		c.p[k] = float64(s.Jobs[i].RemainingSteps()) / theta
		c.age[k] = age[i]
	}
	rows, cols, err := LinearSumAssignment(c)
	if err != nil {
		return nil, fmt.Errorf("policy allox: %w", err)
	}
	// top[g] is the highest position taken on GPU g, and by which job.
	topPos := make([]int, gpus)
	topJob := make([]int, gpus)
	for g := range topPos {
		topPos[g] = -1
	}
	for k, r := range rows {
		g, pos := cols[k]%gpus, cols[k]/gpus
		if pos > topPos[g] {
			topPos[g], topJob[g] = pos, jobs[r]
		}
	}
	var first []int
	for g := range topPos {
		if topPos[g] >= 0 {
			first = append(first, topJob[g])
		}
	}
	return first, nil
}

// alloxCost is the implicit m″×(n·m″) AlloX cost matrix: entry (i, j+(r−1)·n)
// is r·p_i + a_i, computed as NumPy computed it (r·p_i rounded, then + a_i).
type alloxCost struct {
	gpus   int
	p, age []float64
}

func (c *alloxCost) Dims() (int, int) { return len(c.p), c.gpus * len(c.p) }

func (c *alloxCost) At(i, j int) float64 {
	return float64(float64(j/c.gpus+1)*c.p[i]) + c.age[i] // no fused multiply-add
}

// BlockSize is the GPU count: the columns of one position are identical.
func (c *alloxCost) BlockSize() int { return c.gpus }

// FillRow writes row i level by level.
func (c *alloxCost) FillRow(i int, dst []float64) {
	for r := range len(c.p) {
		v := float64(float64(r+1)*c.p[i]) + c.age[i]
		row := dst[r*c.gpus : (r+1)*c.gpus]
		for j := range row {
			row[j] = v
		}
	}
}

// Min is the smallest entry: rounding is monotone, so each row's minimum
// sits at its first or last position.
func (c *alloxCost) Min() float64 {
	m := len(c.p)
	lo := c.At(0, 0)
	for i := range c.p {
		lo = min(lo, c.At(i, 0), c.At(i, (m-1)*c.gpus))
	}
	return lo
}
