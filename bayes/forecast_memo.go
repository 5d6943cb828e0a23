package bayes

// Forecasts of jobs that have reported nothing yet are shared. A job that
// never reported progress, a throughput or a batch-size change (pristine:
// no detector observation, no measured level, no regime change, nothing
// taught) is forecast from its spec and position alone, besides the
// forecaster's shared state (families, peer throughputs, ratio priors,
// batch-size caps, the band's calibration). Two such jobs with equal specs
// (their ids aside) at the same position get the same forecast, bit for
// bit, while the shared state has not changed. When thousands of jobs of
// one shape register at once (a sweep, a coordinator's first rounds), one
// forecast serves all of them.
//
// The shared state's version, f.ver, is bumped by every call that may
// change it (Admit, Observe, Complete, Remove, LoadState); a remembered
// forecast is used only at the version it was made at.

// pristineKey is everything forecastRaw reads of a pristine job.
type pristineKey struct {
	model, mode        string
	workers, bs0, data int
	total0             int64
	declared           float64 // the spec's throughput
	epochs, bs         int
	steps, total       int64
	pos, changeProb    float64
	segStart, segBS    int32
}

// forecastMemo holds the forecasts of pristine jobs made at version ver.
type forecastMemo struct {
	ver uint64
	m   map[pristineKey]Forecast
}

// pristine reports whether j has reported nothing that forecastRaw reads
// beyond its spec and position, and returns its key.
func pristine(j *job) (pristineKey, bool) {
	if len(j.own) > 0 || j.det.Observations() > 0 || j.changes > 0 || j.taught > 0 || j.truncated || len(j.segs) != 1 {
		return pristineKey{}, false
	}
	s := j.spec
	return pristineKey{
		model: s.Model, mode: s.Mode, workers: s.Workers, bs0: s.InitialBatchSize, data: s.DatasetSize,
		total0: s.TotalSteps, declared: s.Throughput,
		epochs: j.epochs, bs: j.bs, steps: j.steps, total: j.total, pos: j.pos, changeProb: j.det.ChangeProb(),
		segStart: j.segs[0].start, segBS: j.segs[0].bs,
	}, true
}

// forecastShared is forecastRaw, answered from the memo for a pristine
// job whose shape was forecast at the current version.
func (f *Forecaster) forecastShared(j *job) (Forecast, error) {
	k, ok := pristine(j)
	if !ok {
		return f.forecastRaw(j)
	}
	if f.memo.ver != f.ver || f.memo.m == nil {
		f.memo.ver = f.ver
		clear(f.memo.m)
		if f.memo.m == nil {
			f.memo.m = map[pristineKey]Forecast{}
		}
	}
	if fc, ok := f.memo.m[k]; ok {
		return fc, nil
	}
	fc, err := f.forecastRaw(j)
	if err == nil {
		f.memo.m[k] = fc
	}
	return fc, err
}

// changed bumps the shared state's version.
func (f *Forecaster) changed() { f.ver++ }
