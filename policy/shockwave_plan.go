package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/shockwave-sched/shockwave/market"
)

// Allocate advances the round pointer, re-solves the market when a trigger
// fired (spec §4.8), and returns the stored plan's list for this round.
func (s *Shockwave) Allocate(snap *Snapshot) (*Plan, error) {
	first := !s.started
	if first {
		s.t0, s.started = snap.Now, true
	}
	v := s.lookup(snap)
	if !first { // the round pointer starts at the first round (spec §4.8)
		s.advance(v)
	}
	for k, j := range snap.Jobs { // a job whose gang width changed (an elastic job) re-plans
		if m := v.metas[k]; m != nil && j.Workers > 0 && m.workers != j.Workers {
			m.workers, s.resolve = j.Workers, true
		}
	}
	if s.online != nil {
		informed, err := s.online.refresh(snap, v.metas)
		if err != nil {
			return nil, err
		}
		s.resolve = s.resolve || informed
		for k, j := range snap.Jobs { // the profile shadow, for the forecast report
			if m := v.metas[k]; m != nil {
				m.epoch = j.Epoch
			}
		}
	}
	if shape := fmt.Sprint(snap.GPUs, snap.Nodes); shape != s.shape {
		if s.shape != "" { // nodes joined or left: new shares, new plan
			s.resolve, s.jobsMoved = true, true
		}
		s.shape = shape
	}
	plan := &Plan{Round: snap.Round}
	if _, planned := s.plan[s.round]; s.resolve || !planned {
		if err := s.solve(v); err != nil {
			return nil, err
		}
		plan.Solved = true
	}
	for _, id := range s.plan[s.round] {
		if v.job(id) != nil { // completed jobs are skipped, with no refill (§4.7)
			plan.Run = append(plan.Run, id)
		}
	}
	s.prevList = plan.Run
	if !s.terse {
		plan.Explain = s.explain(v, plan.Run)
	}
	if r := s.lastResult; r != nil && plan.Solved {
		plan.Note = fmt.Sprintf("market %s: objective %.6g, bound %.6g, gap %.2g, price %.4g", r.Status, r.Objective, r.Bound, r.Gap, r.Price)
		if !r.Relaxed {
			plan.Note += fmt.Sprintf(", fairness bound ρ ≤ %.4g", r.RhoBound)
		}
		if s.capNote != "" {
			plan.Note += "; " + s.capNote
		}
	}
	if len(s.admitErrs) > 0 {
		plan.Note = strings.TrimSpace(plan.Note + "; online forecaster refused: " + strings.Join(s.admitErrs, "; "))
		s.admitErrs = s.admitErrs[:0]
	}
	return plan, nil
}

// swView is one Allocate call's view of its snapshot: each listed job's
// metadata, found with one map lookup, which also stamps the metadata
// with the job's index (swMeta.stamp, at). A job listed twice is found at
// its last listing, as a map of the snapshot's jobs by id would find it.
type swView struct {
	s     *Shockwave
	snap  *Snapshot
	metas []*swMeta       // by snapshot index; nil where the policy has none
	rest  map[string]*Job // the listed jobs without metadata (made when asked)
	typ   *swEstimate     // the jobs of unknown length's (typicalNow), once made
}

func (s *Shockwave) lookup(snap *Snapshot) *swView {
	s.stamp++
	v := &swView{s: s, snap: snap, metas: make([]*swMeta, len(snap.Jobs))}
	for k, j := range snap.Jobs {
		if m := s.meta[j.ID]; m != nil {
			v.metas[k], m.stamp, m.at = m, s.stamp, k
		}
	}
	return v
}

// job returns the snapshot's job id (its last listing), or nil if the
// snapshot does not list it.
func (v *swView) job(id string) *Job {
	if m := v.s.meta[id]; m != nil {
		if m.stamp == v.s.stamp {
			return v.snap.Jobs[m.at]
		}
		return nil // known, so stamped if listed
	}
	if v.rest == nil {
		v.rest = map[string]*Job{}
		for k, j := range v.snap.Jobs {
			if v.metas[k] == nil {
				v.rest[j.ID] = j
			}
		}
	}
	return v.rest[id]
}

// advance updates the progress of the previous round's jobs and the round
// pointer, forcing a re-solve every swReoptRounds rounds (spec §4.8).
func (s *Shockwave) advance(v *swView) {
	for _, id := range s.prevList {
		if m, ok := s.meta[id]; ok && m.stamp == s.stamp {
			m.epoch = v.snap.Jobs[m.at].Epoch
		}
	}
	s.round++
	s.counter++
	if s.counter == swReoptRounds {
		s.resolve, s.counter = true, 0
	}
}

// solve builds the market problem from every active job's calibrated
// forecast and fair-share target, solves it and stores the window's plan.
func (s *Shockwave) solve(v *swView) error {
	snap := v.snap
	n := len(snap.Jobs)
	share := math.Min(1, float64(snap.GPUs)/float64(max(n, 1)))
	sel := make([]int, 0, n)     // the market's jobs: their snapshot indices
	est := make([]swEstimate, n) // by snapshot index; a job's is est[m.at]
	unknown := false
	for k, j := range snap.Jobs {
		if m := v.metas[k]; m != nil {
			if s.online == nil || !s.terse { // online, the profile is a shadow kept to explain
				m.calibrate(j.Measurements, snap.RoundSeconds)
			}
			sel = append(sel, k)
			if j.LengthUnknown() {
				unknown = true // estimated below, from the others (typical)
				continue
			}
			est[k] = s.estimate(j, m)
		}
	}
	if unknown {
		t := s.typical(v, func(k int) swEstimate { return est[k] })
		for _, k := range sel {
			if snap.Jobs[k].LengthUnknown() {
				est[k] = t
			}
		}
		v.typ = &t
	}
	for _, k := range sel {
		m := v.metas[k]
		e := est[m.at]
		// A job with no target yet was left out of the snapshots since it was
		// admitted (the cluster was too small for it, or its node was away).
		if s.jobsMoved || len(m.targets) == 0 || (m.guessed && !e.uninformed) {
			if m.guessed && !e.uninformed {
				m.targets = m.targets[:0] // targets from a forecast that knew no throughput are dropped
			}
			target := m.submit - s.t0 + (e.doneSecs+e.remaining)/share
			m.targets = append(m.targets, swTarget{round: s.round, value: target})
			m.guessed = e.uninformed
		}
	}
	s.jobsMoved = false
	widths := make([]int, len(sel))
	for i, k := range sel {
		widths[i] = v.metas[k].workers
	}
	capacity, capNote := nodeCapacity(snap.GPUs, snap.Nodes, widths)
	s.capNote = capNote
	prob := market.Problem{GPUs: capacity, Round: s.round, Rounds: s.cfg.FutureRounds, RoundSeconds: snap.RoundSeconds}
	prob.Jobs = make([]market.Job, len(sel))
	ids := make([]string, len(sel))
	for i, k := range sel {
		m := v.metas[k]
		e := est[m.at]
		ids[i] = snap.Jobs[k].ID
		prob.Jobs[i] = market.Job{
			ID: ids[i], Workers: m.workers, Epochs: float64(e.epochs), Progress: float64(e.epoch),
			EpochSeconds: e.epochSeconds, Remaining: e.remaining, FairFinish: m.target(s.round),
			RemainingHigh: e.remainingHigh, RemainingCap: paceCap(snap.Jobs[m.at], e, snap.RoundSeconds),
		}
	}
	res, err := market.Solve(prob, &s.settings)
	if err != nil {
		return fmt.Errorf("shockwave: round %d: %w", s.round, err)
	}
	if s.onSolve != nil {
		s.onSolve(market.NewInstance(prob, &s.settings))
	}
	s.lastResult = res
	s.lastIndex = make(map[string]int, len(ids))
	for i, id := range ids {
		s.lastIndex[id] = i
	}
	s.lastIDs = nil
	if len(s.lastIndex) == len(ids) {
		s.lastIDs = ids
	}
	clear(s.plan)
	for t, list := range res.Schedule {
		s.plan[s.round+t] = s.fill(prob, list)
	}
	s.resolve = false
	return nil
}

// fill turns one window round's job indices into ids and hands idle GPUs to
// the jobs with the most remaining work that fit (spec §4.6).
func (s *Shockwave) fill(prob market.Problem, list []int) []string {
	in := make([]bool, len(prob.Jobs))
	idle := prob.GPUs
	out := make([]string, 0, len(list))
	for _, i := range slices.Sorted(slices.Values(list)) {
		in[i] = true
		idle -= prob.Jobs[i].Workers
		out = append(out, prob.Jobs[i].ID)
	}
	if idle <= 0 {
		return out
	}
	rest := make([]int, 0, len(prob.Jobs))
	for i := range prob.Jobs {
		if !in[i] {
			rest = append(rest, i)
		}
	}
	slices.SortStableFunc(rest, func(a, b int) int {
		return cmp.Compare(prob.Jobs[b].Remaining, prob.Jobs[a].Remaining)
	})
	for _, i := range rest {
		if idle <= 0 {
			break
		}
		if w := prob.Jobs[i].Workers; w <= idle {
			idle -= w
			out = append(out, prob.Jobs[i].ID)
		}
	}
	return out
}

// SetExplain turns the per-job explanations of every Plan (Plan.Explain:
// forecast, band, target, planned rounds, reason) on, the default, or
// off. A caller that reads none, such as the simulator when it samples no
// forecasts and shows no plans, turns them off: building them costs a
// profile estimate per job per round. Off, in online mode, the declared
// schedule that only explanations read (the profile shadow) is not
// calibrated either. Decisions are the same either way.
func (s *Shockwave) SetExplain(on bool) { s.terse = !on }

// explain reports, per active job, its forecast, target and plan.
func (s *Shockwave) explain(v *swView, run []string) []Explanation {
	snap := v.snap
	var running map[string]bool // the running jobs without metadata
	for _, id := range run {
		if m := s.meta[id]; m != nil && m.stamp == s.stamp {
			m.ran = s.stamp
		} else {
			if running == nil {
				running = map[string]bool{}
			}
			running[id] = true
		}
	}
	out := make([]Explanation, len(snap.Jobs))
	r := s.lastResult
	next := 0 // where the last solve's order puts the next job
	for k, j := range snap.Jobs {
		m := v.metas[k]
		e := Explanation{Job: j.ID}
		if m != nil {
			e.Run = m.ran == s.stamp
		} else {
			e.Run = running[j.ID]
		}
		target := 0.0 // relative to t0
		if m != nil {
			target = s.explainForecast(&e, v, j, m)
		}
		i, ok := 0, false
		if next < len(s.lastIDs) && s.lastIDs[next] == j.ID { // lastIDs holds each id once
			i, ok = next, true
		} else {
			i, ok = s.lastIndex[j.ID]
		}
		if ok {
			next = i + 1
		}
		if ok && r != nil {
			e.PlannedRounds = r.Rounds[i]
			e.Share = float64(r.Rounds[i]) / float64(s.cfg.FutureRounds)
			e.Price = r.Price
			if i < len(r.Priorities) {
				e.Priority = r.Priorities[i]
			}
			if target > 0 {
				share := math.Min(1, float64(snap.GPUs)/float64(len(snap.Jobs)))
				e.ProjectedRho = (snap.RoundSeconds*float64(s.round) + e.ForecastRemaining/share) / target
			}
		}
		if !e.Run {
			switch {
			case e.PlannedRounds == 0:
				e.Reason = noRoundsReason(s.cfg.FutureRounds)
			default:
				e.Reason = laterReason(e.PlannedRounds)
			}
		}
		out[k] = e
	}
	return out
}

// explainForecast fills e's forecast of j (tracked, with metadata m) and
// returns j's fair-share target relative to t0 (0 when none).
func (s *Shockwave) explainForecast(e *Explanation, v *swView, j *Job, m *swMeta) (target float64) {
	if j.LengthUnknown() {
		e.ForecastRemaining = s.typicalNow(v).remaining
		if target = m.target(s.round); target > 0 {
			e.FairShareFinish = s.t0 + target
		}
		e.ForecastPrior, e.Regime = swUnknownPrior, j.BatchSize
		e.ForecastP10, e.ForecastP90 = e.ForecastRemaining, e.ForecastRemaining
		return target
	}
	e.ForecastRemaining = s.estimate(j, m).remaining
	if target = m.target(s.round); target > 0 {
		e.FairShareFinish = s.t0 + target // on the caller's clock
	}
	if s.online == nil {
		e.Regime = j.BatchSize
		return target
	}
	if len(j.PlannedBatchSizes) > 0 {
		m.calibrate(j.Measurements, v.snap.RoundSeconds)
		e.ProfileRemaining = m.remaining(m.epoch)
	}
	if f, ok := s.onlineForecast(j, m); ok {
		// the used forecast is floored at 1 s (estimate); keep it inside its band
		e.ForecastP10 = math.Min(f.Remaining.P10, e.ForecastRemaining)
		e.ForecastP90 = math.Max(f.Remaining.P90, e.ForecastRemaining)
		e.Regime, e.ChangeProb, e.ForecastPrior = f.BatchSize, f.ChangeProb, f.Family
		if f.Uninformed {
			e.ForecastPrior = "uninformed"
		}
		if on := m.on; on != nil && on.due { // set by onlineForecast
			e.ForecastWaiting, e.ForecastRunSince = true, max(j.RunTime-on.ranAt, 0)
		}
	} else {
		e.ForecastPrior, e.Regime = "default", j.BatchSize
		e.ForecastP10, e.ForecastP90 = e.ForecastRemaining, e.ForecastRemaining
	}
	return target
}

// The reasons explain gives a job it does not run, for windows and planned
// rounds up to 64 made once (fmt.Sprintf for each of thousands of jobs a
// round was a tenth of explain's time at 10,000 jobs).
var noRoundsReasons, laterReasons = func() (a, b [65]string) {
	for n := range a {
		a[n] = fmt.Sprintf("the market plans it no rounds in the next %d", n)
		b[n] = fmt.Sprintf("its %d planned rounds come later in the window", n)
	}
	return a, b
}()

func noRoundsReason(window int) string {
	if window >= 0 && window < len(noRoundsReasons) {
		return noRoundsReasons[window]
	}
	return fmt.Sprintf("the market plans it no rounds in the next %d", window)
}

func laterReason(planned int) string {
	if planned >= 0 && planned < len(laterReasons) {
		return laterReasons[planned]
	}
	return fmt.Sprintf("its %d planned rounds come later in the window", planned)
}
