package bayes

import (
	"cmp"
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/internal/wire"
)

// State serialization (the coordinator's snapshots, DESIGN.md "Durability"):
// a Forecaster writes everything it learned — per-job regime histories,
// detectors' run-length posteriors, family transition counts, peer
// throughput tables, ratio posteriors and batch-size caps — so that a
// forecaster restored into a fresh NewForecaster of the same configuration
// behaves bit for bit like the original. Maps are written in sorted key
// order, floats as bit patterns.

// stateVersion is the version of the forecaster's state encoding. Version 3
// writes a job's measured throughput levels only (version 2 wrote all
// maxLevels entries, the unused ones zero); a state of version 2 still
// loads.
const stateVersion = 3

// MarshalState returns the forecaster's learned state. The configuration
// is not part of it: restore into a forecaster built with the same one.
func (f *Forecaster) MarshalState() []byte {
	var e wire.Encoder
	f.AppendState(&e)
	return e.Bytes()
}

// UnmarshalState replaces the state of a fresh forecaster with one written
// by MarshalState. It fails on malformed input, leaving f unusable.
func (f *Forecaster) UnmarshalState(b []byte) error {
	d := wire.NewDecoder(b)
	f.LoadState(d)
	return d.End()
}

// AppendState writes the state to e.
func (f *Forecaster) AppendState(e *wire.Encoder) {
	e.Int(stateVersion)
	keys := sortedKeys(f.nodes, cmpFamKey)
	e.Len(len(keys))
	for _, k := range keys {
		e.Int(k.level)
		e.Str(k.model)
		e.Str(k.mode)
		e.Int(k.bs0)
		e.Int(k.workers)
		f.nodes[k].append(e)
	}
	tk := sortedKeys(f.thr, cmpThrKey)
	e.Len(len(tk))
	for _, k := range tk {
		s := f.thr[k]
		e.Str(k.model)
		e.Int(k.bs)
		e.Int(k.workers)
		e.F64(s.n)
		e.F64(s.mean)
		e.F64(s.m2)
	}
	rk := sortedKeys(f.ratio, cmp.Compare[string])
	e.Len(len(rk))
	for _, k := range rk {
		r := f.ratio[k]
		e.Str(k)
		e.F64(r.Mu)
		e.F64(r.Kappa)
		e.F64(r.Alpha)
		e.F64(r.Beta)
	}
	bk := sortedKeys(f.batch, cmp.Compare[string])
	e.Len(len(bk))
	for _, k := range bk {
		e.Str(k)
		e.Int(f.batch[k].jobs)
		e.Int(f.batch[k].max)
	}
	e.Len(len(f.cal.scores))
	for _, v := range f.cal.scores {
		e.F64(v)
	}
	e.Int(f.cal.next)
	e.F64(f.cal.scale)
	jk := sortedKeys(f.jobs, cmp.Compare[string])
	e.Len(len(jk))
	for _, id := range jk {
		f.jobs[id].append(e)
	}
}

// LoadState reads a state written by AppendState into f, which must be
// fresh. Errors are recorded in d.
func (f *Forecaster) LoadState(d *wire.Decoder) {
	f.changed()
	v := d.Int()
	if d.Err() == nil && v != stateVersion && v != 2 {
		d.Failf("bayes: state version %d, want 2 or %d", v, stateVersion)
	}
	clear(f.nodes)
	f.rows = 0
	for range d.Len(40) {
		k := famKey{level: d.IntIn(0, 2), model: d.Str(), mode: d.Str(), bs0: d.Int(), workers: d.Int()}
		n := &node{}
		n.load(d)
		f.nodes[k] = n
		f.rows += len(n.occ)
	}
	clear(f.thr)
	for range d.Len(48) {
		k := thrKey{model: d.Str(), bs: d.Int(), workers: d.Int()}
		f.thr[k] = &thrStat{n: d.F64(), mean: d.F64(), m2: d.F64()}
	}
	clear(f.ratio)
	for range d.Len(40) {
		k := d.Str()
		f.ratio[k] = &NormalGamma{Mu: d.F64(), Kappa: d.F64(), Alpha: d.F64(), Beta: d.F64()}
	}
	clear(f.batch)
	for range d.Len(24) {
		k := d.Str()
		f.batch[k] = &modelBatch{jobs: d.Int(), max: d.Int()}
	}
	f.cal.scores = make([]float64, d.Len(8))
	for i := range f.cal.scores {
		f.cal.scores[i] = d.F64()
	}
	if len(f.cal.scores) > calWindow {
		d.Failf("bayes: state: %d calibration scores, at most %d", len(f.cal.scores), calWindow)
	}
	f.cal.next = d.IntIn(0, max(calWindow-1, 0))
	f.cal.scale = d.F64()
	if len(f.cal.scores) == 0 {
		f.cal.scores = nil
	}
	clear(f.jobs)
	for range d.Len(64) {
		j := f.loadJob(d, v)
		if d.Err() != nil {
			return
		}
		if _, dup := f.jobs[j.spec.ID]; dup {
			d.Failf("bayes: state: job %s twice", j.spec.ID)
			return
		}
		f.jobs[j.spec.ID] = j
	}
}

func (n *node) append(e *wire.Encoder) {
	e.Int(n.keys)
	e.Int(n.jobs)
	e.Int(n.nlev)
	for _, l := range n.levels {
		e.I64(int64(l))
	}
	e.Len(len(n.occ))
	for _, row := range n.occ {
		for _, v := range row {
			e.U64(uint64(math.Float32bits(v)))
		}
	}
	e.Len(len(n.moves))
	for _, ms := range n.moves {
		e.Bool(ms != nil)
		e.Len(len(ms))
		for _, m := range ms {
			e.Int(int(m.from))
			e.Int(int(m.to))
			e.U64(uint64(math.Float32bits(m.n)))
		}
	}
}

func (n *node) load(d *wire.Decoder) {
	n.keys = d.IntIn(keyAbsolute, keyMultiplier)
	n.jobs = d.Int()
	n.nlev = d.IntIn(0, maxNodeLevels)
	for i := range n.levels {
		n.levels[i] = int32(d.IntIn(math.MinInt32, math.MaxInt32))
	}
	n.occ = make([][maxNodeLevels]float32, d.Len(8*maxNodeLevels))
	for e := range n.occ {
		for i := range n.occ[e] {
			n.occ[e][i] = math.Float32frombits(uint32(d.IntIn(0, math.MaxUint32)))
		}
	}
	n.moves = make([][]move, d.Len(9))
	for e := range n.moves {
		present := d.Bool()
		ms := make([]move, d.Len(24))
		for m := range ms {
			ms[m] = move{from: int8(d.IntIn(0, maxNodeLevels-1)), to: int8(d.IntIn(0, maxNodeLevels-1)),
				n: math.Float32frombits(uint32(d.IntIn(0, math.MaxUint32)))}
		}
		if present {
			n.moves[e] = ms
		}
	}
	if d.Err() == nil && len(n.moves) != len(n.occ) {
		d.Failf("bayes: state: node with %d occupancy rows and %d move rows", len(n.occ), len(n.moves))
	}
}

func (j *job) append(e *wire.Encoder) {
	s := j.spec
	e.Str(s.ID)
	e.Str(s.Model)
	e.Str(s.Mode)
	e.Int(s.Workers)
	e.Int(s.InitialBatchSize)
	e.Int(s.DatasetSize)
	e.I64(s.TotalSteps)
	e.F64(s.Throughput)
	e.Int(j.epochs)
	e.Int(j.bs)
	e.I64(j.steps)
	e.I64(j.total)
	e.F64(j.pos)
	e.Len(len(j.segs))
	for _, sg := range j.segs {
		e.I64(int64(sg.start))
		e.I64(int64(sg.bs))
	}
	e.Bool(j.truncated)
	e.Int(j.taught)
	e.Int(j.changes)
	e.Int(len(j.own))
	for _, o := range j.own {
		e.Int(o.bs)
		e.F64(o.logThr)
		e.F64(o.v)
	}
	e.F64(j.exec)
	e.Int(j.ncal)
	for _, p := range j.cal[:j.ncal] {
		e.F64(p.exec)
		e.F64(p.mean)
		e.F64(p.p10)
		e.F64(p.p90)
	}
	j.det.append(e)
}

func (f *Forecaster) loadJob(d *wire.Decoder, version int) *job {
	j := &job{}
	s := &j.spec
	s.ID, s.Model, s.Mode = d.Str(), d.Str(), d.Str()
	// A dataset may hold more than 2^31 samples (a registration allows up to
	// the largest batch size times the most epochs): any positive size.
	s.Workers, s.InitialBatchSize, s.DatasetSize = d.IntIn(1, math.MaxInt32), d.IntIn(1, math.MaxInt32), d.IntIn(1, math.MaxInt)
	s.TotalSteps, s.Throughput = d.I64(), d.F64()
	j.epochs, j.bs = d.Int(), d.IntIn(1, math.MaxInt32)
	j.steps, j.total, j.pos = d.I64(), d.I64(), d.F64()
	j.segs = make([]segment, d.Len(16))
	for i := range j.segs {
		j.segs[i] = segment{int32(d.IntIn(math.MinInt32, math.MaxInt32)), int32(d.IntIn(math.MinInt32, math.MaxInt32))}
	}
	j.truncated, j.taught, j.changes = d.Bool(), d.Int(), d.Int()
	nown := d.IntIn(0, maxLevels)
	written := nown
	if version == 2 {
		written = maxLevels // an array: the unused entries too
	}
	for i := range written {
		o := levelObs{bs: d.Int(), logThr: d.F64(), v: d.F64()}
		if i < nown {
			j.own = append(j.own, o)
		}
	}
	j.exec = d.F64()
	j.ncal = d.IntIn(0, len(calMarks))
	for i := range j.cal[:j.ncal] {
		j.cal[i] = calPoint{exec: d.F64(), mean: d.F64(), p10: d.F64(), p90: d.F64()}
	}
	if d.Err() != nil {
		return nil
	}
	if len(j.segs) == 0 {
		d.Failf("bayes: state: job %s without a regime history", s.ID)
		return nil
	}
	j.det = f.det.new(f.cfg.Detector)
	j.det.load(d)
	for lvl := range j.nodes {
		j.nodes[lvl] = f.node(familyKey(lvl, *s))
	}
	j.thr = f.thrEntry(s.Model, j.bs, s.Workers)
	return j
}

func (d *Detector) append(e *wire.Encoder) {
	p := d.cfg.Prior
	e.F64(p.Mu)
	e.F64(p.Kappa)
	e.F64(p.Alpha)
	e.F64(p.Beta)
	e.Int(d.hi)
	e.Int(d.t)
	e.F64(d.changeProb)
	for r := 0; r <= d.hi; r++ {
		if d.w[r] == 0 {
			// A cell without weight is never read (its posterior is left
			// over from earlier observations): written as zeros, so that
			// equal posteriors encode equally.
			e.F64(0)
			e.F64(0)
			e.F64(0)
			e.F64(0)
			continue
		}
		e.F64(d.w[r])
		e.F64(d.mu[r])
		e.F64(d.beta[r])
		e.F64(d.logBeta[r])
	}
}

func (d *Detector) load(dec *wire.Decoder) {
	d.cfg.Prior = NormalGamma{Mu: dec.F64(), Kappa: dec.F64(), Alpha: dec.F64(), Beta: dec.F64()}
	d.hi = dec.IntIn(0, d.cfg.MaxRun)
	d.t = dec.IntIn(0, math.MaxInt32)
	d.changeProb = dec.F64()
	if dec.Err() != nil {
		d.hi = 0
		return
	}
	d.grow(d.hi + 1)
	for r := 0; r <= d.hi; r++ {
		d.w[r], d.mu[r], d.beta[r], d.logBeta[r] = dec.F64(), dec.F64(), dec.F64(), dec.F64()
	}
}

func cmpFamKey(a, b famKey) int {
	return cmp.Or(cmp.Compare(a.level, b.level), cmp.Compare(a.model, b.model), cmp.Compare(a.mode, b.mode),
		cmp.Compare(a.bs0, b.bs0), cmp.Compare(a.workers, b.workers))
}

func cmpThrKey(a, b thrKey) int {
	return cmp.Or(cmp.Compare(a.model, b.model), cmp.Compare(a.bs, b.bs), cmp.Compare(a.workers, b.workers))
}

func sortedKeys[K comparable, V any](m map[K]V, c func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, c)
	return keys
}
