package bayes

import "math"

// Family levels, coarse to fine (the order of job.nodes).
const (
	levelModel = iota
	levelMode
	levelRecipe
)

var familyNames = [3]string{"model", "model+mode", "recipe"}

// famKey names a family node: a model; a model and mode; or a recipe
// (model, mode, bs0, workers). Jobs of one recipe follow the same
// batch-size pattern as a function of the absolute epoch (spec §2.3, §2.5).
type famKey struct {
	level        int
	model, mode  string
	bs0, workers int
}

func familyKey(level int, s JobSpec) famKey {
	k := famKey{level: level, model: s.Model}
	if level >= levelMode {
		k.mode = s.Mode
	}
	if level == levelRecipe {
		k.bs0, k.workers = s.InitialBatchSize, s.Workers
	}
	return k
}

func (f *Forecaster) node(k famKey) *node {
	n := f.nodes[k]
	if n == nil {
		n = &node{}
		f.nodes[k] = n
	}
	return n
}

// move is count n of jobs that went from level index from to level index
// to between epoch e and e+1 (the epoch is the index of the slice holding
// it).
type move struct {
	from, to int8
	n        float32
}

// node holds the per-epoch regime statistics of one family, learned from
// its completed jobs: occ[e][i] jobs were at level i in epoch e and had an
// epoch e+1; moves[e] lists those that changed level between e and e+1.
// The transition estimate at epoch e from level i is the Dirichlet
// posterior mean (counts + β·parent)/(occ + β) (MacKay & Peto 1995's
// hierarchical Dirichlet smoothing), computed in forecast.go.
type node struct {
	jobs   int
	levels [maxNodeLevels]int32
	nlev   int
	occ    [][maxNodeLevels]float32
	moves  [][]move
}

// index returns the level index of batch size bs, adding it when add is
// set and there is room; -1 when absent.
func (n *node) index(bs int, add bool) int {
	for i := range n.nlev {
		if int(n.levels[i]) == bs {
			return i
		}
	}
	if !add || n.nlev == maxNodeLevels {
		return -1
	}
	n.levels[n.nlev] = int32(bs)
	n.nlev++
	return n.nlev - 1
}

// fold adds one completed job's regime history (segments, epochs 0..last−1
// completed) to the node.
func (n *node) fold(segs []segment, last int) {
	if last < 1 {
		return
	}
	n.jobs++
	if len(n.occ) < last-1 {
		n.occ = append(n.occ, make([][maxNodeLevels]float32, last-1-len(n.occ))...)
		n.moves = append(n.moves, make([][]move, last-1-len(n.moves))...)
	}
	for s, seg := range segs {
		from := int(seg.start)
		to := last - 1 // epochs e with a successor inside this segment: [from, to)
		if s+1 < len(segs) {
			to = min(to, int(segs[s+1].start)-1)
		}
		i := n.index(int(seg.bs), true)
		if i < 0 {
			continue
		}
		for e := from; e < to; e++ {
			n.occ[e][i]++
		}
		// the change at the segment's end: epoch end-1 → end
		if s+1 < len(segs) {
			e := int(segs[s+1].start) - 1
			if e >= 0 && e < last-1 {
				k := n.index(int(segs[s+1].bs), true)
				if k >= 0 {
					n.occ[e][i]++
					n.addMove(e, i, k)
				}
			}
		}
	}
}

func (n *node) addMove(e, from, to int) {
	for m := range n.moves[e] {
		if int(n.moves[e][m].from) == from && int(n.moves[e][m].to) == to {
			n.moves[e][m].n++
			return
		}
	}
	n.moves[e] = append(n.moves[e], move{int8(from), int8(to), 1})
}

// thrKey names a peer throughput entry: a model at a batch size on a gang
// width.
type thrKey struct {
	model       string
	bs, workers int
}

// thrStat is the running mean and variance of log steps/s over every
// observation of the peers (and the job itself) at one thrKey.
type thrStat struct {
	n, mean, m2 float64
}

func (s *thrStat) add(x float64) {
	s.n++
	d := x - s.mean
	s.mean += d / s.n
	s.m2 += d * (x - s.mean)
}

// variance is the sample variance (0 with one observation).
func (s *thrStat) variance() float64 {
	if s.n < 2 {
		return 0
	}
	return s.m2 / (s.n - 1)
}

func (f *Forecaster) thrEntry(model string, bs, workers int) *thrStat {
	k := thrKey{model, bs, workers}
	s := f.thr[k]
	if s == nil {
		s = &thrStat{}
		f.thr[k] = s
	}
	return s
}

// peerThroughput looks up the peers' mean log steps/s at (model, bs,
// workers) and the variance of that mean for this job.
func (f *Forecaster) peerThroughput(model string, bs, workers int) (mu, v float64, ok bool) {
	s := f.thr[thrKey{model, bs, workers}]
	if s == nil || s.n == 0 {
		return 0, 0, false
	}
	return s.mean, s.variance() + 1e-4, true
}

var _ = math.Inf
