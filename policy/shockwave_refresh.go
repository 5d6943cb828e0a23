package policy

import (
	"fmt"
	"slices"
)

// DefaultForecastBudget is ShockwaveConfig.ForecastBudget's default: a
// million epoch steps of the forecasts' recursions a round, about 20–30 ms
// on this project's 2-core machine when every step reads family rows.
// The original traces' runs stay under it: the 900-job trace's online run
// gives the same bytes with it and without a bound.
const DefaultForecastBudget = 1_000_000

// refreshShare: a round over the budget still refreshes at least one in
// refreshShare of the jobs with nothing new, so that while that set holds
// still every forecast is at most about refreshShare rounds old.
const refreshShare = 64

// refresh observes every job of the snapshot and recomputes forecasts;
// metas is the snapshot's metadata by index (swView). It reports whether
// a job's forecast became informed (its first throughput measurement
// arrived): a material change that warrants a re-solve.
//
// A job that reported something new since the last round, or was never
// forecast, is forecast every round. The others' forecasts change only
// with what other jobs taught the forecaster (families, peer throughputs),
// and in a large cluster with history recomputing all of them is most of a
// round's work (docs/scale.md, session 23): they are forecast while the
// round's steps stay under the budget. While under it, refresh goes
// through the jobs in the snapshot's order, observing and forecasting each
// in turn, as if there were no bound. The round that first runs over
// skips the rest of those jobs; the next round observes every job and
// forecasts the new, then refreshes the others from the first one skipped
// on, wrapping around, until the budget is spent (at least one in
// refreshShare of them).
func (o *swOnline) refresh(snap *Snapshot, metas []*swMeta) (informed bool, err error) {
	start := o.fc.Steps()
	spent := func() bool { return o.budget >= 0 && int64(o.fc.Steps()-start) >= o.budget }
	forecast := func(j *Job, e *swOnlineJob) error {
		f, err := o.fc.Forecast(j.ID)
		if err != nil {
			return fmt.Errorf("shockwave: online forecast: %w", err)
		}
		if e.cached && e.forecast.Uninformed && !f.Uninformed {
			informed = true
		}
		e.forecast, e.cached = f, true
		return nil
	}
	type waitingJob struct {
		k int
		e *swOnlineJob
	}
	var waiting []waitingJob // when over: the jobs with nothing new, by snapshot index
	skipped := -1
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
		if !fed && e.cached {
			if o.over {
				waiting = append(waiting, waitingJob{k, e})
				continue
			}
			if spent() {
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
		if skipped >= 0 {
			o.over, o.cursor = true, skipped
		}
		return informed, nil
	}
	o.over = false
	if len(waiting) == 0 {
		return informed, nil
	}
	from, _ := slices.BinarySearchFunc(waiting, o.cursor, func(w waitingJob, k int) int { return w.k - k })
	least := (len(waiting) + refreshShare - 1) / refreshShare
	for t := range waiting {
		w := waiting[(from+t)%len(waiting)]
		if t >= least && spent() {
			o.over, o.cursor = true, w.k
			break
		}
		if err := forecast(snap.Jobs[w.k], w.e); err != nil {
			return false, err
		}
	}
	return informed, nil
}
