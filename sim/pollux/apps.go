package pollux

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// eps is the artifact's small constant in batch-size rounding (spec §3.2).
const eps = 1e-8

// appConst holds the constants of applications.py that are not in the trace
// files (spec §1.5): the epoch count, and yolov3's per-GPU batch-size cap.
var appConst = map[string]struct {
	maxEpochs int
	maxLocal  int // 0: the largest local_bsz in placements.csv
}{
	"bert": {2, 0}, "cifar10": {100, 0}, "deepspeech2": {80, 0},
	"imagenet": {90, 0}, "ncf": {10, 0}, "yolov3": {50, 8},
}

// bszPoint is one measured per-GPU batch size of a placement.
type bszPoint struct{ local, step, sync float64 }

// App is one application's model: its constants, measured throughput by
// placement and per-GPU batch size, and its validation runs (spec §1, §2).
type App struct {
	Name      string
	InitBsz   int
	MaxBsz    int
	MinLocal  int
	MaxLocal  int
	MaxEpochs int

	validated []int        // validated global batch sizes, ascending
	runs      [][]epochRow // runs[i] is the run at validated[i]
	progress  []float64    // progress[e]: progress to finish epochs 0..e-1
	small     map[int][]bszPoint
	mesh      *triMesh // placements over five or more nodes
}

// Apps is the set of built-in applications, by name.
type Apps map[string]*App

// BuiltinApps builds the six applications of the Pollux artifact from the
// generated tables (apps_table.go).
func BuiltinApps() (Apps, error) {
	out := Apps{}
	for i := range builtinTraces {
		a, err := newApp(&builtinTraces[i])
		if err != nil {
			return nil, err
		}
		out[a.Name] = a
	}
	return out, nil
}

func newApp(t *appTrace) (*App, error) {
	c, ok := appConst[t.Name]
	if !ok {
		return nil, fmt.Errorf("pollux: no constants for application %q", t.Name)
	}
	if len(t.Validation) == 0 || len(t.Placements) == 0 {
		return nil, fmt.Errorf("pollux: application %s has no traces", t.Name)
	}
	a := &App{Name: t.Name, MaxEpochs: c.maxEpochs, small: map[int][]bszPoint{}}
	for _, v := range t.Validation {
		if len(v.Epochs) < c.maxEpochs {
			return nil, fmt.Errorf("pollux: %s validation-%d has %d epochs, need %d", t.Name, v.Batch, len(v.Epochs), c.maxEpochs)
		}
		a.validated = append(a.validated, v.Batch)
		a.runs = append(a.runs, v.Epochs)
	}
	a.InitBsz, a.MaxBsz = a.validated[0], a.validated[len(a.validated)-1]
	a.progress = make([]float64, c.maxEpochs+1)
	for e := 1; e <= c.maxEpochs; e++ {
		p := math.Inf(1)
		for _, r := range a.runs {
			p = min(p, r[e-1].Progress)
		}
		a.progress[e] = p
	}
	a.MinLocal, a.MaxLocal = math.MaxInt, 0
	for _, p := range t.Placements {
		id := int(p.Placement)
		a.small[id] = append(a.small[id], bszPoint{p.Local, p.Step, p.Sync})
		a.MinLocal = min(a.MinLocal, int(p.Local))
		a.MaxLocal = max(a.MaxLocal, int(p.Local))
	}
	if c.maxLocal > 0 {
		a.MaxLocal = c.maxLocal
	}
	for id := range a.small {
		slices.SortFunc(a.small[id], func(x, y bszPoint) int { return cmpF(x.local, y.local) })
	}
	if err := a.buildMesh(t); err != nil {
		return nil, err
	}
	return a, nil
}

func cmpF(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// ProgressToFinish is the progress at which a job of this application
// completes (spec §2.2, §2.4).
func (a *App) ProgressToFinish() float64 { return a.progress[a.MaxEpochs] }

// ProgressAt is the progress needed to finish epochs 0..epoch−1.
func (a *App) ProgressAt(epoch int) float64 {
	return a.progress[min(max(epoch, 0), a.MaxEpochs)]
}

// bracket returns the validated sizes around B and the weight of hi.
func (a *App) bracket(b float64) (lo, hi int, w float64) {
	if b < float64(a.InitBsz)-1e-9 || b > float64(a.MaxBsz)+1e-9 {
		panic(fmt.Sprintf("pollux: %s batch size %g outside [%d, %d]", a.Name, b, a.InitBsz, a.MaxBsz))
	}
	hi = sort.Search(len(a.validated), func(i int) bool { return float64(a.validated[i]) >= b })
	hi = min(hi, len(a.validated)-1)
	if float64(a.validated[hi]) == b || hi == 0 {
		return hi, hi, 0
	}
	lo = hi - 1
	return lo, hi, (b - float64(a.validated[lo])) / float64(a.validated[hi]-a.validated[lo])
}

// GradStats returns the interpolated (grad_sqr, grad_var) of epoch e at
// global batch size B (spec §2.2).
func (a *App) GradStats(b float64, e int) (sqr, v float64) {
	lo, hi, w := a.bracket(b)
	e = min(e, a.MaxEpochs-1)
	l, h := a.runs[lo][e], a.runs[hi][e]
	return w*h.GradSqr + (1-w)*l.GradSqr, w*h.GradVar + (1-w)*l.GradVar
}

// Iteration returns the interpolated cumulative iterations at the end of
// epoch e at batch size B (Optimus's remaining-work estimate, spec §6.2).
func (a *App) Iteration(b float64, e int) float64 {
	lo, hi, w := a.bracket(b)
	e = min(e, a.MaxEpochs-1)
	return w*a.runs[hi][e].Iteration + (1-w)*a.runs[lo][e].Iteration
}

// interpBsz interpolates step and sync times in local_bsz; ok is false
// outside the measured range (the artifact raises there, spec §9.11).
func interpBsz(pts []bszPoint, local float64) (step, sync float64, ok bool) {
	n := len(pts)
	if n == 0 || local < pts[0].local-1e-9 || local > pts[n-1].local+1e-9 {
		return 0, 0, false
	}
	i := sort.Search(n, func(i int) bool { return pts[i].local >= local })
	if i == 0 {
		return pts[0].step, pts[0].sync, true
	}
	if i >= n {
		i = n - 1
	}
	p, q := pts[i-1], pts[i]
	w := (local - p.local) / (q.local - p.local)
	return p.step + w*(q.step-p.step), p.sync + w*(q.sync-p.sync), true
}

// canonical returns the placement id of a placement: zeros dropped, rotated
// to its lexicographically smallest rotation, digits concatenated, and its
// node count.
func canonical(placement []int) (id, nodes, replicas int) {
	var buf [16]int
	d := buf[:0]
	for _, v := range placement {
		if v > 0 {
			d = append(d, v)
			replicas += v
		}
	}
	nodes = len(d)
	if nodes == 0 || nodes > 4 {
		return 0, nodes, replicas
	}
	best := -1
	for s := 0; s < nodes; s++ {
		if best < 0 || rotLess(d, s, best) {
			best = s
		}
	}
	for k := 0; k < nodes; k++ {
		id = id*10 + d[(best+k)%nodes]
	}
	return id, nodes, replicas
}

func rotLess(d []int, s, t int) bool {
	n := len(d)
	for k := 0; k < n; k++ {
		x, y := d[(s+k)%n], d[(t+k)%n]
		if x != y {
			return x < y
		}
	}
	return false
}

// Throughput returns the true (step_time, sync_time) of one optimiser step
// without accumulation at a placement (replicas per node) and per-GPU batch
// size (spec §2.3). It returns an error outside the measured range.
func (a *App) Throughput(placement []int, local int) (step, sync float64, err error) {
	id, nodes, replicas := canonical(placement)
	if replicas == 0 {
		return 0, 0, fmt.Errorf("pollux: %s: empty placement", a.Name)
	}
	if nodes <= 4 {
		pts, ok := a.small[id]
		if !ok {
			return 0, 0, fmt.Errorf("pollux: %s: placement %d not measured", a.Name, id)
		}
		if step, sync, ok = interpBsz(pts, float64(local)); !ok {
			return 0, 0, fmt.Errorf("pollux: %s: local batch size %d outside the measured range of placement %d", a.Name, local, id)
		}
		return step, sync, nil
	}
	step, sync, ok := a.mesh.at([3]float64{float64(min(nodes, 16)), float64(replicas), float64(local)})
	if !ok {
		return 0, 0, fmt.Errorf("pollux: %s: (%d nodes, %d replicas, local %d) outside the measured range", a.Name, nodes, replicas, local)
	}
	return step, sync, nil
}
