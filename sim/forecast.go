package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/coordinator"
)

// ForecastMarks are the fractions of a job's progress at which the
// forecast report samples its remaining-time forecasts.
var ForecastMarks = []float64{0.10, 0.25, 0.50, 0.75, 0.90}

// ForecastPoint is one job's forecasts at the first round boundary at which
// its progress (steps done over total steps) reached Mark, and the truth:
// the execution time it really needed from there to completion.
type ForecastPoint struct {
	Job      int     `json:"job"`  // trace line index
	Mark     float64 `json:"mark"` // progress fraction sampled
	Progress float64 `json:"progress"`
	Time     float64 `json:"time_s"`
	// Forecast is the remaining-time estimate the policy used; P10 and
	// P90 its online quantiles (0 in profile mode).
	Forecast float64 `json:"forecast_s"`
	P10      float64 `json:"p10_s,omitempty"`
	P90      float64 `json:"p90_s,omitempty"`
	Prior    string  `json:"prior,omitempty"`
	// Profile is the original's profile estimate R̂ (spec §4.3) at the same
	// moment, from the job's declared schedule.
	Profile float64 `json:"profile_s,omitempty"`
	// True is the execution time the job actually spent from this point
	// to its completion.
	True float64 `json:"true_s"`

	// The point's slices (SliceNames). FirstOfRecipe: no job of the same
	// recipe (model, mode, initial batch size, gang width) was admitted
	// before this one. PeerFinished: a job of its recipe had completed by
	// the mark. ChangeAhead: its batch size changed after the mark.
	FirstOfRecipe bool `json:"first_of_recipe,omitempty"`
	PeerFinished  bool `json:"peer_finished,omitempty"`
	ChangeAhead   bool `json:"change_ahead,omitempty"`

	exec    float64 // the job's execution seconds at the mark
	changes int     // the job's batch-size changes by the mark
}

// ForecastError summarizes absolute percentage errors |f − t|/t.
type ForecastError struct {
	Points     int     `json:"points"`
	MedianAPE  float64 `json:"median_ape"`
	P90APE     float64 `json:"p90_ape"`
	CoverP1090 float64 `json:"coverage_p10_p90,omitempty"` // share of truths inside [P10, P90]
}

// recordForecasts samples the explanations of one round's plan for the
// jobs that crossed a progress mark.
func (r *run) recordForecasts(rd *coordinator.Round) {
	for _, e := range rd.Plan.Explain {
		j := r.byID[e.Job]
		if j == nil || j.ended || j.nextMark >= len(ForecastMarks) {
			continue
		}
		p := 0.0
		if j.st.TotalSteps > 0 {
			p = math.Min(1, float64(j.st.Done)/float64(j.st.TotalSteps))
		}
		for j.nextMark < len(ForecastMarks) && p >= ForecastMarks[j.nextMark] {
			j.marks = append(j.marks, ForecastPoint{
				Job: j.spec.ID, Mark: ForecastMarks[j.nextMark], Progress: p, Time: rd.Start,
				Forecast: e.ForecastRemaining, P10: e.ForecastP10, P90: e.ForecastP90, Prior: e.ForecastPrior,
				Profile: e.ProfileRemaining, exec: j.exec, changes: j.changes,
				FirstOfRecipe: j.firstOfRecipe, PeerFinished: r.finished[j.recipe()] > 0,
			})
			j.nextMark++
		}
	}
}

// settleForecasts fills in the truth of a completed job's points.
func (r *run) settleForecasts(j *simJob) {
	r.finished[j.recipe()]++
	for _, m := range j.marks {
		m.True = j.exec - m.exec
		m.ChangeAhead = j.changes > m.changes
		r.res.Forecasts = append(r.res.Forecasts, m)
	}
	j.marks = nil
}

// sortForecasts orders the points by job, then mark.
func (res *Result) sortForecasts() {
	slices.SortFunc(res.Forecasts, func(a, b ForecastPoint) int {
		return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Mark, b.Mark))
	})
}

// ForecastErrors returns the errors of the used forecasts and of the
// profile estimates, over the points whose truth is positive (at mark, if
// mark > 0; over every mark otherwise).
func ForecastErrors(points []ForecastPoint, mark float64) (used, profile ForecastError) {
	var fe, pe []float64
	inside := 0
	for _, p := range points {
		if p.True <= 0 || (mark > 0 && p.Mark != mark) {
			continue
		}
		fe = append(fe, math.Abs(p.Forecast-p.True)/p.True)
		if p.P90 > 0 && p.True >= p.P10 && p.True <= p.P90 {
			inside++
		}
		if p.Profile > 0 {
			pe = append(pe, math.Abs(p.Profile-p.True)/p.True)
		}
	}
	used = summarize(fe)
	if len(fe) > 0 {
		used.CoverP1090 = float64(inside) / float64(len(fe))
	}
	return used, summarize(pe)
}

func summarize(xs []float64) ForecastError {
	if len(xs) == 0 {
		return ForecastError{}
	}
	slices.Sort(xs)
	return ForecastError{Points: len(xs), MedianAPE: percentile(xs, 50), P90APE: percentile(xs, 90)}
}

// recipe names the job's family of identical schedules.
func (j *simJob) recipe() string {
	return fmt.Sprintf("%s|%s|%d|%d", j.spec.Model, j.spec.Mode, j.spec.BatchSize, j.spec.ScaleFactor)
}

// SliceNames are the slices of the forecast report, in order: every point;
// the first job of its recipe; no job of its recipe finished yet; a job of
// its recipe finished; a batch-size change still ahead of the point.
var SliceNames = []string{"all", "first of recipe", "no finished peer", "peer finished", "change ahead"}

// InSlice reports whether p belongs to the named slice.
func (p ForecastPoint) InSlice(name string) bool {
	switch name {
	case "all":
		return true
	case "first of recipe":
		return p.FirstOfRecipe
	case "no finished peer":
		return !p.PeerFinished
	case "peer finished":
		return p.PeerFinished
	case "change ahead":
		return p.ChangeAhead
	}
	return false
}

// SliceError is the error of one slice at one mark (0: every mark).
type SliceError struct {
	Slice   string        `json:"slice"`
	Mark    float64       `json:"mark"`
	Used    ForecastError `json:"used"`
	Profile ForecastError `json:"profile"`
}

// ForecastSlices breaks the errors down by slice and mark: for every
// slice of SliceNames, each of ForecastMarks and then all marks together.
func ForecastSlices(points []ForecastPoint) []SliceError {
	var out []SliceError
	for _, name := range SliceNames {
		var in []ForecastPoint
		for _, p := range points {
			if p.InSlice(name) {
				in = append(in, p)
			}
		}
		for _, m := range append(slices.Clone(ForecastMarks), 0) {
			u, pr := ForecastErrors(in, m)
			out = append(out, SliceError{Slice: name, Mark: m, Used: u, Profile: pr})
		}
	}
	return out
}
