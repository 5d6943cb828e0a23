package market

import "math"

// twinKey is everything of a job the model reads besides its ID (jobModel,
// ftfLow, critLow, the bounds and candidates), with its weight: float
// fields by their bits, so that equal keys give equal values, bit for bit.
type twinKey struct {
	workers int
	f       [8]uint64
}

// shareCurves is false only in tests that compare the models built with
// and without shared curves.
var shareCurves = true

// reps returns, for each canonical job, the first job equal to it in
// every field but the ID and of the same weight (itself if none is
// earlier). Jobs registered together and run alike (a sweep, a load test)
// stay equal for many rounds; their curves are then built once.
func (in *instance) reps(weights []float64) []int32 {
	rep := make([]int32, len(in.jobs))
	first := make(map[twinKey]int32, 64)
	for c := range in.jobs {
		if !shareCurves {
			rep[c] = int32(c)
			continue
		}
		j := &in.jobs[c]
		k := twinKey{workers: j.Workers, f: [8]uint64{
			math.Float64bits(j.Epochs), math.Float64bits(j.Progress), math.Float64bits(j.EpochSeconds),
			math.Float64bits(j.Remaining), math.Float64bits(j.FairFinish), math.Float64bits(j.RemainingHigh),
			math.Float64bits(j.RemainingCap), math.Float64bits(weights[c]),
		}}
		r, ok := first[k]
		if !ok {
			r = int32(c)
			first[k] = r
		}
		rep[c] = r
	}
	return rep
}
