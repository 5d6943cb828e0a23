package policy

import (
	"fmt"
	"slices"
)

// DefaultForecastBudget is ShockwaveConfig.ForecastBudget's default for
// a small cluster: a million epoch steps of the forecasts' recursions a
// round, about 40–50 ms on this project's 2-core machine when every step
// reads family rows (docs/scale.md, session 24). The default shrinks by
// jobRoundSteps for each job of the round, down to minDefaultBudget: the
// rest of a round's work grows with its jobs, and the round's latency is
// what the budget bounds. The original traces' runs stay under it (the
// 900-job trace's rounds take at most about 710,000 steps with 790 jobs,
// against a default of 960,500 then): their runs give the same bytes with
// it and without a bound.
const DefaultForecastBudget = 1_000_000

// jobRoundSteps is what one job costs a round outside its forecast, in
// forecast steps: the policy's round with empty families (its market,
// admissions and explanations) took 22–24 ms at 10,000 jobs, about 2.3 µs
// a job, and a step takes 40–50 ns (docs/scale.md, session 24). At 10,000
// jobs the default is then 500,000 steps, with which the live load with
// history meets its targets on two cores; the default of 1,000,000 alone
// does not.
const jobRoundSteps = 50

// minDefaultBudget is the least the default falls to, whatever the
// jobs: a quarter of DefaultForecastBudget.
const minDefaultBudget = DefaultForecastBudget / 4

// roundBudget is the budget of a round of jobs jobs: the configured one, or
// the default for that many (−1: no bound).
func (o *swOnline) roundBudget(jobs int) int64 {
	if o.budget != 0 {
		return o.budget
	}
	return max(DefaultForecastBudget-jobRoundSteps*int64(jobs), minDefaultBudget)
}

// refreshShare: a round over the budget still refreshes at least one in
// refreshShare of the jobs due a forecast and one in refreshShare of the
// others, so that while those sets hold still every forecast is at most
// about refreshShare rounds old.
const refreshShare = 64

// refresh observes every job of the snapshot and recomputes forecasts;
// metas is the snapshot's metadata by index (swView). It reports whether
// a job's forecast became informed (its first throughput measurement
// arrived): a material change that warrants a re-solve.
//
// A job never forecast is forecast at once, and so is one whose forecast
// knew no throughput when it reports something new. The others are
// forecast while the round's recursion steps stay under the budget: in a
// large cluster with history, recomputing every forecast is most of a
// round's work (docs/scale.md, sessions 23 and 24), even for the running
// jobs alone, which report something new every round. While under it,
// refresh goes through the jobs in the snapshot's order, observing and
// forecasting each in turn, as if there were no bound. The round that
// first runs over skips the rest. The next rounds observe every job,
// forecast those that cannot wait, then the others in turns (each list
// from where the last round stopped, wrapping around, at least one in
// refreshShare of it): first the jobs that reported something new since
// their last forecast (due), then the rest, until the budget is spent.
func (o *swOnline) refresh(snap *Snapshot, metas []*swMeta) (informed bool, err error) {
	start, budget := o.fc.Steps(), o.roundBudget(len(snap.Jobs))
	spent := func() bool { return budget >= 0 && int64(o.fc.Steps()-start) >= budget }
	forecast := func(j *Job, e *swOnlineJob) error {
		f, err := o.fc.Forecast(j.ID)
		if err != nil {
			return fmt.Errorf("shockwave: online forecast: %w", err)
		}
		if e.cached && e.forecast.Uninformed && !f.Uninformed {
			informed = true
		}
		e.forecast, e.cached, e.due, e.ranAt = f, true, false, j.RunTime
		return nil
	}
	var due, waiting []swQueued // when over, by snapshot index
	skipped, skippedDue := -1, -1
	for k, j := range snap.Jobs {
		var e *swOnlineJob
		if m := metas[k]; m != nil && m.on != nil { // the link onlineForecast keeps
			e = m.on
		} else {
			e = o.jobs[j.ID]
		}
		if e == nil || !e.tracked {
			continue
		}
		fed, err := o.observe(j, e)
		if err != nil {
			return false, fmt.Errorf("shockwave: online forecast: %w", err)
		}
		if fed && e.cached {
			e.due = true
		}
		// A job whose forecast knew no throughput and that reported
		// something new may have measured its first: that warrants a
		// re-solve at once, so it does not wait for its turn.
		if e.cached && !(e.due && e.forecast.Uninformed) {
			switch {
			case o.over && e.due:
				due = append(due, swQueued{k, e})
				continue
			case o.over:
				waiting = append(waiting, swQueued{k, e})
				continue
			case spent() && e.due:
				if skippedDue < 0 {
					skippedDue = k
				}
				continue
			case spent():
				if skipped < 0 {
					skipped = k
				}
				continue
			}
		}
		if err := forecast(j, e); err != nil {
			return false, err
		}
	}
	if !o.over {
		if skipped >= 0 || skippedDue >= 0 {
			o.over, o.cursor, o.dueCursor = true, max(skipped, 0), max(skippedDue, 0)
		}
		return informed, nil
	}
	o.over = false
	for _, turn := range []struct {
		jobs   []swQueued
		cursor *int
	}{{due, &o.dueCursor}, {waiting, &o.cursor}} {
		if len(turn.jobs) == 0 {
			continue
		}
		from, _ := slices.BinarySearchFunc(turn.jobs, *turn.cursor, func(w swQueued, k int) int { return w.k - k })
		least := (len(turn.jobs) + refreshShare - 1) / refreshShare
		for t := range turn.jobs {
			w := turn.jobs[(from+t)%len(turn.jobs)]
			if t >= least && spent() {
				o.over, *turn.cursor = true, w.k
				break
			}
			if err := forecast(snap.Jobs[w.k], w.e); err != nil {
				return false, err
			}
		}
	}
	return informed, nil
}

// swQueued is a job waiting for its turn to be forecast: its snapshot
// index and entry.
type swQueued struct {
	k int
	e *swOnlineJob
}
