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
		n = &node{keys: keyMultiplier}
		switch {
		case k.level == levelRecipe:
			n.keys = keyAbsolute
		case k.level == levelMode && k.mode == "accordion":
			n.keys = keyBase
		}
		f.nodes[k] = n
	}
	return n
}

// How a node names batch-size levels, so that coarse families pool jobs
// with different initial batch sizes: a recipe by the batch size itself;
// an accordion model+mode family by "bs0" (key 0) or the absolute large
// batch size (Accordion switches between bs0 and the model's Bmax, §2.3);
// any other coarse family by the multiple of bs0 (gns doubles, §2.3), key
// −round(1024·bs/bs0).
const (
	keyAbsolute = iota
	keyBase
	keyMultiplier
)

// levelKey is the node key of batch size bs for a job starting at bs0.
func levelKey(kind, bs, bs0 int) int32 {
	switch kind {
	case keyBase:
		if bs == bs0 {
			return 0
		}
		return int32(bs)
	case keyMultiplier:
		return -int32(math.Round(1024 * float64(bs) / float64(bs0)))
	}
	return int32(bs)
}

// levelBS inverts levelKey for a job starting at bs0; -1 when the key names
// no integral batch size for it.
func levelBS(kind int, key int32, bs0 int) int {
	switch {
	case kind == keyBase && key == 0:
		return bs0
	case key < 0:
		num := int64(-key) * int64(bs0)
		if num%1024 != 0 {
			return -1
		}
		return int(num / 1024)
	}
	return int(key)
}

// move is count n of jobs that went from level index from to level index
// to between epoch e and e+1 (the epoch is the index of the slice holding
// it).
type move struct {
	from, to int8
	n        float32
}

// node holds the per-epoch regime statistics of one family, learned from
// the epochs its jobs went through: occ[e][i] jobs were at level i in epoch
// e and then started epoch e+1; moves[e] lists those that changed level
// between e and e+1. jobs counts the jobs that taught it anything.
// The transition estimate at epoch e from level i is the Dirichlet
// posterior mean (counts + β·parent)/(occ + β) (MacKay & Peto 1995's
// hierarchical Dirichlet smoothing), computed in forecast.go.
type node struct {
	keys   int // keyAbsolute, keyBase or keyMultiplier
	jobs   int
	levels [maxNodeLevels]int32
	nlev   int
	occ    [][maxNodeLevels]float32
	moves  [][]move
}

// The families' memory is bounded, whatever jobs declare and report (a
// job may imply 100,000 epochs, and each model, mode and recipe makes
// nodes of its own): the nodes hold at most maxFamilyRows epoch rows
// together (about 56 bytes each in memory and 73 in the saved state: 29
// and 38 MB at most; the 900-job trace's runs stay far below). Past that,
// the nodes with the most rows forget what they learned, as if new
// (evict): the order needs nothing beyond the saved state, and the longest
// histories are the ones only jobs as long can read.
const maxFamilyRows = 1 << 19

// forget clears what the node learned.
func (n *node) forget() { *n = node{keys: n.keys} }

// evict makes the nodes with the most epoch rows (ties: the first by key)
// forget, other than those of the teach under way (keep), while the nodes
// hold more than maxFamilyRows rows together.
func (f *Forecaster) evict(keep *[3]*node) {
	for f.rows > maxFamilyRows {
		var victim *node
		var vk famKey
		for k, n := range f.nodes {
			if len(n.occ) == 0 || n == keep[0] || n == keep[1] || n == keep[2] {
				continue
			}
			if victim == nil || len(n.occ) > len(victim.occ) || len(n.occ) == len(victim.occ) && cmpFamKey(k, vk) < 0 {
				victim, vk = n, k
			}
		}
		if victim == nil {
			return
		}
		f.rows -= len(victim.occ)
		victim.forget()
	}
}

// index returns the level index of level key, adding it when add is set
// and there is room; -1 when absent.
func (n *node) index(key int32, add bool) int {
	for i := range n.nlev {
		if n.levels[i] == key {
			return i
		}
	}
	if !add || n.nlev == maxNodeLevels {
		return -1
	}
	n.levels[n.nlev] = key
	n.nlev++
	return n.nlev - 1
}

// teach adds the transitions e → e+1 for e in [from, to) of one job's
// regime history (segments; initial batch size bs0) to the node: occ[e]
// at the level of epoch e, and a move when epoch e+1 is at another level.
func (n *node) teach(segs []segment, from, to, bs0 int) {
	if to <= from {
		return
	}
	if len(n.occ) < to {
		n.occ = append(n.occ, make([][maxNodeLevels]float32, to-len(n.occ))...)
		n.moves = append(n.moves, make([][]move, to-len(n.moves))...)
	}
	s := len(segs) - 1 // the segment holding epoch from
	for s > 0 && int(segs[s].start) > from {
		s--
	}
	for e := from; e < to; e++ {
		for s+1 < len(segs) && int(segs[s+1].start) <= e {
			s++
		}
		cur := int(segs[s].bs)
		next := cur
		if s+1 < len(segs) && int(segs[s+1].start) <= e+1 {
			next = int(segs[s+1].bs)
		}
		i := n.index(levelKey(n.keys, cur, bs0), true)
		if i < 0 {
			continue
		}
		n.occ[e][i]++
		if next != cur {
			if k := n.index(levelKey(n.keys, next, bs0), true); k >= 0 {
				n.addMove(e, i, k)
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
