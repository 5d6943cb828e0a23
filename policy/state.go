package policy

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/bayes"
	"github.com/shockwave-sched/shockwave/internal/wire"
	"github.com/shockwave-sched/shockwave/market"
)

// Stateful is implemented by every registered policy: it saves the state the
// policy built from the calls it received, and restores it into a fresh
// instance built by New with the same name and options, which then behaves
// bit for bit like the original (the coordinator's snapshots rely on this;
// see coordinator/snapshot.go). The configuration is not part of the state.
type Stateful interface {
	// MarshalState returns the policy's state.
	MarshalState() []byte
	// UnmarshalState replaces the state of a fresh instance. It fails on
	// malformed input or a state of another policy.
	UnmarshalState(b []byte) error
}

// allocatorState is implemented by allocators that keep state between
// calls (Themis, AlloX); the others keep none.
type allocatorState interface {
	appendState(e *wire.Encoder)
	loadState(d *wire.Decoder)
}

// stateVersion is the version of every policy's state encoding.
const stateVersion = 1

func header(e *wire.Encoder, name string) {
	e.Str(name)
	e.Int(stateVersion)
}

func checkHeader(d *wire.Decoder, name string) {
	got, v := d.Str(), d.Int()
	if d.Err() == nil && (got != name || v != stateVersion) {
		d.Failf("policy: state of %s (version %d), want %s (version %d)", got, v, name, stateVersion)
	}
}

// MarshalState writes the mechanism's times, deficits and allocation, and
// the allocator's state.
func (g *GavelRound) MarshalState() []byte {
	var e wire.Encoder
	header(&e, g.Name())
	appendFloatMap(&e, g.x)
	appendFloatMap(&e, g.jobTime)
	appendFloatMap(&e, g.deficit)
	e.F64(g.workerTime)
	e.F64(g.lastReset)
	e.Bool(g.update)
	e.Int(g.gpus)
	if a, ok := g.alloc.(allocatorState); ok {
		a.appendState(&e)
	}
	return e.Bytes()
}

// UnmarshalState restores a state written by MarshalState.
func (g *GavelRound) UnmarshalState(b []byte) error {
	d := wire.NewDecoder(b)
	checkHeader(d, g.Name())
	g.x, g.jobTime, g.deficit = loadFloatMap(d), loadFloatMap(d), loadFloatMap(d)
	g.workerTime, g.lastReset, g.update, g.gpus = d.F64(), d.F64(), d.Bool(), d.Int()
	if a, ok := g.alloc.(allocatorState); ok {
		a.loadState(d)
	}
	return d.End()
}

func (t *Themis) appendState(e *wire.Encoder) {
	appendFloatMap(e, t.cum)
	ids := sortedIDs(t.prevRem)
	e.Len(len(ids))
	for _, id := range ids {
		e.Str(id)
		e.I64(t.prevRem[id])
	}
	appendFloatMap(e, t.prevIso)
}

func (t *Themis) loadState(d *wire.Decoder) {
	t.cum = loadFloatMap(d)
	n := d.Len(16)
	t.prevRem = make(map[string]int64, n)
	for range n {
		id := d.Str()
		t.prevRem[id] = d.I64()
	}
	t.prevIso = loadFloatMap(d)
}

func (a *AlloX) appendState(e *wire.Encoder) { appendFloatMap(e, a.prev) }

func (a *AlloX) loadState(d *wire.Decoder) { a.prev = loadFloatMap(d) }

// appendFloatMap writes m in key order.
func appendFloatMap(e *wire.Encoder, m map[string]float64) {
	ids := sortedIDs(m)
	e.Len(len(ids))
	for _, id := range ids {
		e.Str(id)
		e.F64(m[id])
	}
}

// loadFloatMap reads a map written by appendFloatMap; it is never nil.
func loadFloatMap(d *wire.Decoder) map[string]float64 {
	n := d.Len(16)
	m := make(map[string]float64, n)
	for range n {
		id := d.Str()
		m[id] = d.F64()
	}
	return m
}

// MarshalState writes the Shockwave policy's state: per-job metadata and
// fair-share targets, the round pointer and re-solve triggers, the stored
// plan of the window, what explanations need of the last market result,
// and in online mode the forecaster with what it was last told.
func (s *Shockwave) MarshalState() []byte {
	var e wire.Encoder
	e.GrowLike(s.stateSize)
	e.Str(s.Name())
	e.Int(swStateVersion)
	ids := sortedIDs(s.meta)
	e.Len(len(ids))
	for _, id := range ids {
		e.Str(id)
		s.meta[id].append(&e)
	}
	e.Strs(s.liveOrder())
	e.Int(s.round)
	e.Int(s.counter)
	e.Bool(s.resolve)
	e.Str(s.shape)
	e.Str(s.capNote)
	e.Bool(s.jobsMoved)
	rounds := slices.Sorted(maps.Keys(s.plan))
	e.Len(len(rounds))
	for _, r := range rounds {
		e.Int(r)
		e.Strs(s.plan[r])
	}
	e.Strs(s.prevList)
	appendResult(&e, s.lastResult)
	li := sortedIDs(s.lastIndex)
	e.Bool(s.lastIndex != nil)
	e.Len(len(li))
	for _, id := range li {
		e.Str(id)
		e.Int(s.lastIndex[id])
	}
	e.Bool(s.online != nil)
	if s.online != nil {
		s.online.append(&e)
	}
	e.F64(s.t0)
	e.Bool(s.started)
	e.Strs(s.admitErrs)
	if s.online != nil { // version 3
		e.Bool(s.online.over)
		e.Int(s.online.cursor)
		e.Int(s.online.dueCursor) // version 4
		var due []string
		var ranAt []float64 // the run time of each forecast, the cached jobs in id order
		for _, id := range sortedIDs(s.online.jobs) {
			j := s.online.jobs[id]
			if j.due {
				due = append(due, id)
			}
			if j.cached {
				ranAt = append(ranAt, j.ranAt)
			}
		}
		e.Strs(due)
		e.F64s(ranAt)
	}
	s.stateSize = len(e.Bytes())
	return e.Bytes()
}

// UnmarshalState restores a state written by MarshalState into a fresh
// policy with the same configuration.
func (s *Shockwave) UnmarshalState(b []byte) error {
	s.lastIDs = nil // explain reads lastIndex until the next solve
	d := wire.NewDecoder(b)
	got, v := d.Str(), d.Int()
	if d.Err() == nil && (got != s.Name() || v < stateVersion || v > swStateVersion) {
		d.Failf("policy: state of %s (version %d), want %s (version %d to %d)", got, v, s.Name(), stateVersion, swStateVersion)
	}
	n := d.Len(8)
	s.meta = make(map[string]*swMeta, n)
	for range n {
		id := d.Str()
		m := &swMeta{}
		if v == stateVersion {
			m.loadV1(d)
		} else {
			m.load(d)
		}
		s.meta[id] = m
	}
	s.order = d.Strs()
	s.reindexOrder()
	s.round, s.counter = d.Int(), d.Int()
	s.resolve, s.shape, s.capNote, s.jobsMoved = d.Bool(), d.Str(), d.Str(), d.Bool()
	n = d.Len(17)
	s.plan = make(map[int][]string, n)
	for range n {
		r := d.Int()
		s.plan[r] = d.Strs()
	}
	s.prevList = d.Strs()
	s.lastResult = loadResult(d)
	hasIndex := d.Bool()
	n = d.Len(16)
	s.lastIndex = nil
	if hasIndex {
		s.lastIndex = make(map[string]int, n)
	}
	for range n {
		id := d.Str()
		i := d.Int()
		if hasIndex {
			s.lastIndex[id] = i
		}
	}
	if online := d.Bool(); d.Err() == nil && online != (s.online != nil) {
		d.Failf("policy: shockwave state of another information mode (online %v)", online)
	}
	if s.online != nil {
		s.online.load(d)
	}
	s.t0, s.started = d.F64(), d.Bool()
	s.admitErrs = d.Strs()
	if s.online != nil {
		s.online.over, s.online.cursor, s.online.dueCursor = false, 0, 0
		if v >= 3 { // a state before version 3 was saved after a round that forecast every job
			s.online.over, s.online.cursor = d.Bool(), d.IntIn(0, math.MaxInt32)
		}
		cached := sortedIDs(s.online.jobs)
		cached = slices.DeleteFunc(cached, func(id string) bool { return !s.online.jobs[id].cached })
		for _, id := range cached { // a round forecast every job that reported something new
			e := s.online.jobs[id]
			e.ranAt = e.seen.runTime
		}
		if v >= 4 { // before version 4, a round forecast every job that reported something new
			s.online.dueCursor = d.IntIn(0, math.MaxInt32)
			for _, id := range d.Strs() {
				e := s.online.jobs[id]
				if d.Err() == nil && (e == nil || !e.cached) {
					d.Failf("policy: shockwave state: job %s is due a forecast but has none", id)
				} else if e != nil {
					e.due = true
				}
			}
			ranAt := d.F64s()
			if d.Err() == nil && len(ranAt) != len(cached) {
				d.Failf("policy: shockwave state: %d forecasts' run times for %d forecasts", len(ranAt), len(cached))
			}
			for i, id := range cached {
				if i >= len(ranAt) {
					break
				}
				if r := ranAt[i]; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
					d.Failf("policy: shockwave state: job %s's forecast made at run time %v", id, r)
				}
				s.online.jobs[id].ranAt = ranAt[i]
			}
		}
	}
	if err := d.End(); err != nil {
		return err
	}
	return s.checkState()
}

// checkState checks the references between the parts of a restored state:
// the explanations index the last result by lastIndex.
func (s *Shockwave) checkState() error {
	for id, i := range s.lastIndex {
		if s.lastResult == nil || i < 0 || i >= len(s.lastResult.Rounds) {
			return fmt.Errorf("policy: shockwave state: job %s indexes no entry of the last result", id)
		}
	}
	return nil
}

// swStateVersion is the version of the Shockwave policy's state: 2 keeps
// each job's declared schedule run-length encoded (swSeg); 3 adds, online,
// where the forecast refreshes left off (swOnline.over and cursor); 4 the
// jobs due a forecast and where their refreshes left off (swOnlineJob.due,
// swOnline.dueCursor). States of versions 1 (per-epoch arrays), 2 and 3
// still load.
const swStateVersion = 4

func (m *swMeta) append(e *wire.Encoder) {
	e.Int(m.epochs)
	e.Int(m.workers)
	e.Len(len(m.segs))
	for _, sg := range m.segs {
		e.Int(int(sg.end))
		e.Int(int(sg.mode))
		e.F64(sg.pre)
	}
	e.Bool(m.dur != nil)
	e.F64s(m.dur)
	m.appendTail(e)
}

// appendTail writes what follows the schedule, the same in versions 1 and 2.
func (m *swMeta) appendTail(e *wire.Encoder) {
	e.Int(m.dataset)
	e.Int(m.epoch)
	e.F64(m.submit)
	e.Ints(m.modes)
	e.Len(len(m.modes)) // α by batch size, in the modes' (sorted) order
	for k, b := range m.modes {
		e.Int(b)
		e.F64(m.alpha[k])
	}
	e.Bool(m.targets != nil)
	e.Len(len(m.targets))
	for _, t := range m.targets {
		e.Int(t.round)
		e.F64(t.value)
	}
	e.Bool(m.guessed)
}

// load reads metadata written by append (version 2).
func (m *swMeta) load(d *wire.Decoder) {
	m.epochs, m.workers = d.Int(), d.Int()
	m.segs = make([]swSeg, d.Len(24))
	for i := range m.segs {
		m.segs[i] = swSeg{end: int32(d.IntIn(1, math.MaxInt32)), mode: int32(d.IntIn(0, math.MaxInt32)), pre: d.F64()}
	}
	calibrated := d.Bool()
	m.dur = d.F64s()
	if !calibrated {
		m.dur = nil
	}
	m.loadTail(d)
	if d.Err() == nil && calibrated && len(m.dur) != len(m.segs) {
		d.Failf("policy: shockwave state: job metadata with %d schedule runs and %d durations", len(m.segs), len(m.dur))
	}
	m.checkSegs(d)
	m.derive()
}

// loadV1 reads metadata of version 1, whose schedule is per-epoch arrays
// (planned batch sizes, preprofiled and calibrated durations), into the
// run-length encoding: runs end where any of the three changes.
func (m *swMeta) loadV1(d *wire.Decoder) {
	m.epochs, m.workers = d.Int(), d.Int()
	planned, pre, dur := d.Ints(), d.F64s(), d.F64s()
	m.loadTail(d)
	if d.Err() == nil && (len(pre) != len(dur) || len(planned) != len(pre) || m.epochs != len(planned)) {
		d.Failf("policy: shockwave state: job metadata with %d epochs, %d planned, %d durations", m.epochs, len(planned), len(dur))
	}
	for _, b := range planned {
		if d.Err() == nil && !slices.Contains(m.modes, b) {
			d.Failf("policy: shockwave state: job metadata: planned batch size %d is not among the modes %v", b, m.modes)
		}
	}
	if d.Err() != nil {
		return
	}
	m.segs, m.dur = nil, nil
	calibrated := false
	for e, b := range planned {
		k, _ := slices.BinarySearch(m.modes, b)
		calibrated = calibrated || math.Float64bits(dur[e]) != math.Float64bits(pre[e])
		if n := len(m.segs); n > 0 && int(m.segs[n-1].mode) == k && math.Float64bits(m.segs[n-1].pre) == math.Float64bits(pre[e]) &&
			math.Float64bits(m.dur[n-1]) == math.Float64bits(dur[e]) {
			m.segs[n-1].end++
			continue
		}
		m.segs = append(m.segs, swSeg{end: int32(e + 1), mode: int32(k), pre: pre[e]})
		m.dur = append(m.dur, dur[e])
	}
	if !calibrated {
		m.dur = nil
	}
	m.checkSegs(d) // a job of no epochs
	m.derive()
}

// loadTail reads what appendTail wrote.
func (m *swMeta) loadTail(d *wire.Decoder) {
	m.dataset, m.epoch, m.submit = d.Int(), d.Int(), d.F64()
	m.modes = d.Ints()
	n := d.Len(16)
	m.alpha = make([]float64, n)
	for k := range n {
		if b := d.Int(); d.Err() == nil && (k >= len(m.modes) || b != m.modes[k]) {
			d.Failf("policy: shockwave state: job metadata: prior %d is for batch size %d, not the mode %v", k, b, m.modes)
		}
		m.alpha[k] = d.F64()
	}
	if d.Err() == nil && n != len(m.modes) {
		d.Failf("policy: shockwave state: job metadata: %d priors for %d modes", n, len(m.modes))
	}
	present := d.Bool()
	n = d.Len(16)
	if present {
		m.targets = make([]swTarget, n)
	}
	for i := range n {
		t := swTarget{round: d.Int(), value: d.F64()}
		if present {
			m.targets[i] = t
		}
	}
	m.guessed = d.Bool()
	if d.Err() == nil && (!slices.IsSorted(m.modes) || len(slices.Compact(slices.Clone(m.modes))) != len(m.modes)) {
		d.Failf("policy: shockwave state: job metadata: modes %v are not distinct and sorted", m.modes)
	}
}

// checkSegs checks a loaded schedule: runs that end in increasing order at
// the last epoch, each at one of the modes.
func (m *swMeta) checkSegs(d *wire.Decoder) {
	prev := 0
	for _, sg := range m.segs {
		if d.Err() != nil {
			return
		}
		if int(sg.end) <= prev {
			d.Failf("policy: shockwave state: job metadata: schedule run ending at epoch %d after one ending at %d", sg.end, prev)
		} else if int(sg.mode) >= len(m.modes) {
			d.Failf("policy: shockwave state: job metadata: schedule run at mode %d of the %d modes %v (not among the modes)", sg.mode, len(m.modes), m.modes)
		}
		prev = int(sg.end)
	}
	if d.Err() == nil && (prev != m.epochs || m.epochs < 1) {
		d.Failf("policy: shockwave state: job metadata with %d epochs, its schedule runs to %d", m.epochs, prev)
	}
}

// append writes the forecaster, then what it was last told about each
// tracked job, then each job's latest forecast, both in id order.
func (o *swOnline) append(e *wire.Encoder) {
	o.fc.AppendState(e)
	var tracked, cached []string
	for _, id := range sortedIDs(o.jobs) {
		if o.jobs[id].tracked {
			tracked = append(tracked, id)
		}
		if o.jobs[id].cached {
			cached = append(cached, id)
		}
	}
	e.Len(len(tracked))
	for _, id := range tracked {
		v := o.jobs[id].seen
		e.Str(id)
		e.I64(v.steps)
		e.I64(v.total)
		e.Int(v.batch)
		e.F64(v.runTime)
		e.Int(v.measRound)
	}
	e.Len(len(cached))
	for _, id := range cached {
		f := o.jobs[id].forecast
		e.Str(id)
		e.F64(f.Remaining.Mean)
		e.F64(f.Remaining.P10)
		e.F64(f.Remaining.P90)
		e.F64(f.EpochSeconds)
		e.Int(f.Epochs)
		e.Int(f.Epoch)
		e.Int(f.BatchSize)
		e.Int(f.RegimeEpochs)
		e.F64(f.ChangeProb)
		e.Int(f.NextBatchSize)
		e.F64(f.NextProb)
		e.Str(f.Family)
		e.Bool(f.Uninformed)
	}
}

func (o *swOnline) load(d *wire.Decoder) {
	o.fc.LoadState(d)
	n := d.Len(48)
	clear(o.jobs)
	for range n {
		id := d.Str()
		e := o.entry(id)
		e.seen = swSeen{steps: d.I64(), total: d.I64(), batch: d.Int(), runTime: d.F64(), measRound: d.Int()}
		e.tracked = true
	}
	n = d.Len(105)
	for range n {
		id := d.Str()
		var f bayes.Forecast
		f.Remaining.Mean, f.Remaining.P10, f.Remaining.P90 = d.F64(), d.F64(), d.F64()
		f.EpochSeconds = d.F64()
		f.Epochs, f.Epoch, f.BatchSize, f.RegimeEpochs = d.Int(), d.Int(), d.Int(), d.Int()
		f.ChangeProb, f.NextBatchSize, f.NextProb = d.F64(), d.Int(), d.F64()
		f.Family, f.Uninformed = d.Str(), d.Bool()
		if d.Err() != nil {
			return
		}
		e := o.entry(id)
		e.forecast, e.cached = f, true
	}
}

func appendResult(e *wire.Encoder, r *market.Result) {
	e.Bool(r != nil)
	if r == nil {
		return
	}
	e.Int(int(r.Status))
	e.Bool(r.Relaxed)
	e.Ints(r.Rounds)
	e.F64s(r.Progress)
	e.Bool(r.Schedule != nil)
	e.Len(len(r.Schedule))
	for _, l := range r.Schedule {
		e.Ints(l)
	}
	e.F64(r.Objective)
	e.F64(r.Bound)
	e.F64(r.Gap)
	e.F64(r.MaxRemaining)
	e.F64(r.Price)
	e.F64s(r.Priorities)
	e.F64s(r.Rho)
	st := r.Stats
	for _, v := range []int{st.Candidates, st.Evaluated, st.Nodes, st.Branches, st.Profiles, st.PackChecks, st.Repairs} {
		e.Int(v)
	}
}

func loadResult(d *wire.Decoder) *market.Result {
	if !d.Bool() {
		return nil
	}
	r := &market.Result{}
	r.Status = market.Status(d.IntIn(0, math.MaxInt32))
	r.Relaxed = d.Bool()
	r.Rounds, r.Progress = d.Ints(), d.F64s()
	present := d.Bool()
	n := d.Len(9)
	if present {
		r.Schedule = make([][]int, n)
	}
	for t := range n {
		l := d.Ints()
		if present {
			r.Schedule[t] = l
		}
	}
	r.Objective, r.Bound, r.Gap, r.MaxRemaining, r.Price = d.F64(), d.F64(), d.F64(), d.F64(), d.F64()
	r.Priorities, r.Rho = d.F64s(), d.F64s()
	st := &r.Stats
	st.Candidates, st.Evaluated, st.Nodes, st.Branches = d.Int(), d.Int(), d.Int(), d.Int()
	st.Profiles, st.PackChecks, st.Repairs = d.Int(), d.Int(), d.Int()
	return r
}
