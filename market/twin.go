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
// stay equal for many rounds; their curves are then built once. The
// representatives are kept in an open-addressing table by the hash of
// their key; a probe compares hashes, then keys field by field.
func (in *instance) reps(weights []float64) []int32 {
	N := len(in.jobs)
	rep := make([]int32, N)
	for c := range rep {
		rep[c] = int32(c)
	}
	if !shareCurves {
		return rep
	}
	var t twinTable
	t.init(2 * min(N, repProbe))
	copies := 0
	for c := range N {
		if c == repProbe {
			if copies*repProbeShare < c {
				// Few copies so far: sharing would save less than the
				// table costs, and every later job stays its own
				// representative (always exact; only slower where
				// copies follow).
				break
			}
			t.init(2 * N) // the probe's representatives again, in a table for all
			for r := range c {
				if rep[r] == int32(r) {
					t.find(in, weights, r)
				}
			}
		}
		if r := t.find(in, weights, c); r != c {
			rep[c] = int32(r)
			copies++
		}
	}
	return rep
}

// twinTable is an open-addressing table of representatives by the hash
// of their key; a probe compares hashes, then keys field by field.
type twinTable struct {
	slot []int32 // representative + 1; 0: empty
	hash []uint64
}

func (t *twinTable) init(n int) {
	size := 16
	for size < n {
		size <<= 1
	}
	t.slot, t.hash = make([]int32, size), make([]uint64, size)
}

// find returns the representative of job c's key, which is c when the
// table held none (c is then added). A probe gives up after maxTwinProbe
// slots (keys crafted to collide cannot make the search quadratic) and
// returns c, which is always a valid representative of itself.
func (t *twinTable) find(in *instance, weights []float64, c int) int {
	k := in.twinKey(c, weights)
	h := twinHash(k)
	mask := uint64(len(t.slot) - 1)
	i := h & mask
	for range maxTwinProbe {
		r := int(t.slot[i]) - 1
		if r < 0 {
			t.slot[i], t.hash[i] = int32(c)+1, h
			return c
		}
		if t.hash[i] == h && in.twinKey(r, weights) == k {
			return r
		}
		i = (i + 1) & mask
	}
	return c
}

// maxTwinProbe bounds one search of the twin table.
const maxTwinProbe = 64

func (in *instance) twinKey(c int, weights []float64) twinKey {
	j := &in.jobs[c]
	return twinKey{workers: j.Workers, f: [8]uint64{
		math.Float64bits(j.Epochs), math.Float64bits(j.Progress), math.Float64bits(j.EpochSeconds),
		math.Float64bits(j.Remaining), math.Float64bits(j.FairFinish), math.Float64bits(j.RemainingHigh),
		math.Float64bits(j.RemainingCap), math.Float64bits(weights[c]),
	}}
}

// reps stops looking for copies after the first repProbe jobs when fewer
// than one in repProbeShare of them was a copy (a variable: tests probe
// fewer jobs).
var repProbe, repProbeShare = 1024, 8

// twinHash is the hash reps finds keys by (a variable: tests make every
// key collide).
var twinHash = func(k twinKey) uint64 {
	h := uint64(k.workers)
	for _, v := range k.f {
		h = (h^v)*0x100000001b3 + 0x9e3779b97f4a7c15
	}
	// The table indexes by the low bits, which the products above take
	// from the fields' low bits alone (often zero in a float's mantissa):
	// a finalizer mixes the high bits down (MurmurHash3's fmix64).
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
