package policy

import "slices"

// PlaceholderModel is the model family of a job whose work is not known
// yet: a submitted job, which the coordinator registers with a
// placeholder (one step of a one-sample dataset at batch size 1) until its
// process starts, which happens only where it is granted GPUs, and
// registers the job's real parameters.
const PlaceholderModel = "submitted"

// LengthUnknown reports whether j is such a placeholder: registered under
// PlaceholderModel and never run (no step done, no run time). Its
// registered shape says nothing of its length, so a policy that plans by
// length must not read it as a one-step job. A job that ran is judged by
// what it reported, whatever model it declared.
func (j *Job) LengthUnknown() bool {
	return j.Model == PlaceholderModel && j.StepsDone <= 0 && j.RunTime <= 0
}

// swUnknownEpochs is the pseudo-epochs of a job of unknown length, as in
// swDefault: the market counts progress as a fraction of them.
const swUnknownEpochs = 100

// typical is the estimate the Shockwave policy gives a job of unknown
// length (Job.LengthUnknown): a job that has not started, as long as the
// median expected length (seconds done plus forecast remaining) of the
// listed jobs whose length is known, or, when none is, as one planning
// window (FutureRounds rounds). It is uninformed, like a job with no
// measured throughput.
//
// Read as the one step it registered, a placeholder would be forecast to
// finish in a second: its fair-share target would lie in the past after
// one round, so that no bound on ρ it could meet binds it (its ρ with no
// rounds sets the tightest bound), and the cluster's backlog would seem to
// be the known jobs alone, whose critical bounds (market, FairnessTightest)
// then claim every round. Submitted jobs would never start once the first
// of them ran long. As a typical job it competes as a job submitted with
// its real length most likely would.
//
// est gives the estimate of the job at snapshot index k; nil means
// Shockwave.estimate.
func (s *Shockwave) typical(v *swView, est func(k int) swEstimate) swEstimate {
	var lengths []float64
	for k, j := range v.snap.Jobs {
		m := v.metas[k]
		if m == nil || j.LengthUnknown() {
			continue
		}
		var e swEstimate
		if est != nil {
			e = est(k)
		} else {
			e = s.estimate(j, m)
		}
		lengths = append(lengths, e.doneSecs+e.remaining)
	}
	length := v.snap.RoundSeconds * float64(s.cfg.FutureRounds)
	if n := len(lengths); n > 0 {
		slices.Sort(lengths)
		length = lengths[(n-1)/2]
	}
	length = max(length, 1)
	return swEstimate{epochs: swUnknownEpochs, epochSeconds: length / swUnknownEpochs, remaining: length, uninformed: true}
}

// hasUnknown reports whether the snapshot lists a job of unknown length
// that the policy tracks.
func (v *swView) hasUnknown() bool {
	for k, j := range v.snap.Jobs {
		if v.metas[k] != nil && j.LengthUnknown() {
			return true
		}
	}
	return false
}

// swUnknownPrior is the forecast prior a plan's explanation names for a
// job of unknown length.
const swUnknownPrior = "unknown length: typical"

// typicalNow is typical for v's Allocate call, made once (by the solve,
// when it ran).
func (s *Shockwave) typicalNow(v *swView) swEstimate {
	if v.typ == nil {
		t := s.typical(v, nil)
		v.typ = &t
	}
	return *v.typ
}
