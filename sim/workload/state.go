package workload

import (
	"fmt"
	"math"
)

// gnsRuntimeHorizon is the minimum length of the gns pattern the run-time
// rule looks ahead in (spec §2.5).
const gnsRuntimeHorizon = 760

// State is the run-time state of a simulated job (spec §2.5). The simulator
// advances Done; SetFlags and Rescale implement the batch-size adaptation.
// Create it with NewState.
type State struct {
	BatchSize  int     // current batch size, initially bs0
	TotalSteps int64   // steps to run at BatchSize, rescaled on each change
	Done       int64   // steps completed at BatchSize; can exceed TotalSteps after a rescale (§3.5)
	Throughput float64 // θ = thr(model@BatchSize, sf), steps/s
	// Grow and Shrink are the adaptation flags. SetFlags only sets them;
	// they persist until Rescale consumes them after the job's next
	// micro-task, so a change lags one scheduled round (§2.5, §9 item 2).
	Grow, Shrink bool

	model   string
	speed   float64     // the realization's speed factor (0 means 1)
	warp    *warp       // the realization's schedule jitter (nil: none)
	profile *JobProfile // the job's own per-epoch profile (nil: table and rules)
	target  int         // the profile's batch size pending a Rescale
}

// Realize applies a job's draws (Noise.Realize) to its fresh state: every
// throughput is scaled by the speed factor and the adaptation rule runs on
// the jittered schedule. A nil r keeps the deterministic model.
func (s *State) Realize(sp Spec, r *Realization) {
	if r == nil {
		return
	}
	s.speed = r.speed()
	s.Throughput *= s.speed
	m, ok := LookupModel(sp.Model)
	if !ok {
		return
	}
	horizon := Epochs(sp.Model, sp.BatchSize, sp.TotalSteps) + r.jitter + 2
	if p := sp.Profile; p != nil {
		s.warp = newWarp(r, horizon, func(e int) int { bs, _ := p.at(e); return bs })
		return
	}
	switch sp.Mode {
	case GNS:
		s.warp = newWarp(r, horizon, func(e int) int { return gnsAt(m.Name, sp.BatchSize, sp.ScaleFactor, 1<<30, e) })
	case Accordion:
		s.warp = newWarp(r, horizon, func(e int) int { return boolInt(runtimeCritical(m.Name, sp.BatchSize, e)) })
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// NewState returns the initial state of a job: bs0, the trace's total
// steps, nothing done, θ = thr(job_type, sf). It fails when the model is
// unknown or the table has no entry for the job type on sf GPUs. An entry
// of 0 is accepted (the simulator never dispatches a job with θ = 0).
func NewState(sp Spec, thr *Throughputs) (*State, error) {
	if _, ok := LookupModel(sp.Model); !ok {
		return nil, fmt.Errorf("unknown model %q", sp.Model)
	}
	if p := sp.Profile; p != nil {
		if err := p.check(sp); err != nil {
			return nil, err
		}
		return &State{BatchSize: sp.BatchSize, TotalSteps: sp.TotalSteps, Throughput: p.Throughputs[0], model: sp.Model, profile: p}, nil
	}
	jt := JobType(sp.Model, sp.BatchSize)
	v, ok := thr.Lookup(jt, sp.ScaleFactor)
	if !ok {
		return nil, fmt.Errorf("no throughput for %q on %d GPUs in the %s table", jt, sp.ScaleFactor, thr.nameOrNil())
	}
	return &State{BatchSize: sp.BatchSize, TotalSteps: sp.TotalSteps, Throughput: v, model: sp.Model}, nil
}

// RuntimeEpoch is the epoch index the adaptation rules use,
// e = ceil(done / ceil(D / bs)) (spec §2.5, §9 item 1). Note the ceil: one
// step into epoch k already counts as k+1.
func (s *State) RuntimeEpoch() int {
	ipe := IterationsPerEpoch(s.model, s.BatchSize)
	if ipe == 0 {
		return 0
	}
	return int(ceilDiv(s.Done, int64(ipe)))
}

// SetFlags evaluates the job's adaptation rule at a round boundary (spec
// §2.5, §3.3 step 3). It only ever sets a flag:
//   - gns: grow when the gns pattern of (model, bs0, sf) with horizon
//     max(760, e+2) exceeds the current batch size at epoch e or e+1, and
//     the batch size is not the model top;
//   - accordion (not Transformer): grow when bs = bs0, the epoch is not
//     critical and bs is not the model top; otherwise shrink when bs ≠ bs0,
//     the epoch is critical and bs is not the model bottom. The run-time
//     critical test differs from the planned one: no 30 % rule, no
//     Recommendation windows at 60–70 and 80–90, no 600-epoch cap for
//     ResNet-50;
//   - static: nothing.
func (s *State) SetFlags(sp Spec) {
	m, ok := LookupModel(sp.Model)
	if !ok {
		return
	}
	if s.profile != nil {
		s.flagsProfile()
		return
	}
	e := s.RuntimeEpoch()
	bs := s.BatchSize
	switch sp.Mode {
	case GNS:
		horizon := max(gnsRuntimeHorizon, e+2)
		if (gnsAt(m.Name, sp.BatchSize, sp.ScaleFactor, horizon, s.warp.at(e+1)) > bs ||
			gnsAt(m.Name, sp.BatchSize, sp.ScaleFactor, horizon, s.warp.at(e)) > bs) && bs != m.MaxBatchSize {
			s.Grow = true
		}
	case Accordion:
		if m.Name == Transformer {
			return
		}
		critical := runtimeCritical(m.Name, sp.BatchSize, s.warp.at(e))
		if bs == sp.BatchSize && !critical && bs != m.MaxBatchSize {
			s.Grow = true
		} else if bs != sp.BatchSize && critical && bs != m.MinBatchSize {
			s.Shrink = true
		}
	}
}

// Rescale consumes the adaptation flags after a completed micro-task (spec
// §2.5, §3.3 step 2.6), applying in order:
//  1. reject (clear the flags) when the model is LM, ResNet-18, ResNet-50 or
//     Recommendation and bs0 is the model's maximum;
//  2. new_bs: gns 2·bs; accordion Bmax on grow, bs0 on shrink (grow wins if
//     both are set); static bs;
//  3. revert (clear the flags) when (model@new_bs, sf) has no entry in thr
//     (an entry of 0 counts as present);
//  4. bs := new_bs, θ := thr(model@new_bs, sf);
//  5. total steps: r = old_bs/new_bs as a float, old_E = ceil(total /
//     ceil(D/old_bs)), nt = ceil(total·r); if ceil(nt / ceil(D/new_bs)) ≠
//     old_E then nt = ceil(D/new_bs)·old_E; total := nt;
//  6. done := ceil(done / ceil(D/old_bs)) · ceil(D/new_bs): completed epochs
//     are rounded up, so done can exceed total (the failure path of §3.5);
//  7. clear the flags.
//
// It reports whether steps 4–7 ran. Without a flag set it does nothing.
func (s *State) Rescale(sp Spec, thr *Throughputs) (changed bool) {
	if !s.Grow && !s.Shrink {
		return false
	}
	m, ok := LookupModel(sp.Model)
	if ok && s.profile != nil {
		return s.rescaleProfile(m)
	}
	if !ok || (m.Name != Transformer && sp.BatchSize == m.MaxBatchSize) {
		s.clearFlags()
		return false
	}
	oldBS, newBS := s.BatchSize, s.BatchSize
	switch sp.Mode {
	case GNS:
		newBS = 2 * oldBS
	case Accordion:
		if s.Grow {
			newBS = m.MaxBatchSize
		} else {
			newBS = sp.BatchSize
		}
	}
	oldIPE := int64(IterationsPerEpoch(m.Name, oldBS))
	newIPE := int64(IterationsPerEpoch(m.Name, newBS))
	v, ok := thr.Lookup(JobType(m.Name, newBS), sp.ScaleFactor)
	if !ok || oldIPE == 0 || newIPE == 0 {
		s.clearFlags()
		return false
	}
	if s.speed > 0 {
		v *= s.speed
	}
	s.rescaleSteps(oldIPE, newIPE, oldBS, newBS)
	s.Throughput = v
	return true
}

// rescaleSteps applies steps 4–7 of Rescale but θ: the batch size, the
// total and done steps, the flags.
func (s *State) rescaleSteps(oldIPE, newIPE int64, oldBS, newBS int) {
	s.BatchSize = newBS
	r := float64(oldBS) / float64(newBS)
	oldE := ceilDiv(s.TotalSteps, oldIPE)
	nt := int64(math.Ceil(float64(s.TotalSteps) * r))
	if ceilDiv(nt, newIPE) != oldE {
		nt = newIPE * oldE
	}
	s.TotalSteps = nt
	s.Done = ceilDiv(s.Done, oldIPE) * newIPE
	s.clearFlags()
}

func (s *State) clearFlags() { s.Grow, s.Shrink = false, false }
