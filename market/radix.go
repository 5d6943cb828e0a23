package market

import "math"

// run is a stretch of equal marginal gains of one job: rounds n0 ..
// n0+cnt−1, each gaining gain; key orders the runs (descending).
type run struct {
	key     uint64 // descending(gain, or gain per GPU)
	gain    float64
	job     int32
	n0, cnt int32
}

// descending maps a float to a key whose unsigned order is the float's
// order reversed: larger floats get smaller keys; −0 and +0 get the same
// key, as they compare equal. (Gains are finite: no NaN.)
func descending(v float64) uint64 {
	if v == 0 {
		v = 0 // −0 → +0
	}
	u := math.Float64bits(v)
	if u>>63 != 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return ^u
}

// sortRuns sorts runs by key, then n0, then job, ascending: by gain
// descending as sortedItems needs. It is a least-significant-digit radix
// sort (stable counting sorts of one byte each: the job's bytes, then
// n0's, then the key's), skipping the bytes on which all runs agree. The
// order is total over distinct runs, so it is the order any correct sort
// gives. It returns the sorted slice (runs or a buffer of its length).
func sortRuns(runs []run) []run {
	if len(runs) < 2 {
		return runs
	}
	buf := make([]run, len(runs))
	var count [256]int
	pass := func(digit func(*run) byte) {
		clear(count[:])
		for i := range runs {
			count[digit(&runs[i])]++
		}
		if count[digit(&runs[0])] == len(runs) {
			return // all agree on this byte
		}
		sum := 0
		for b, k := range count {
			count[b] = sum
			sum += k
		}
		for i := range runs {
			d := digit(&runs[i])
			buf[count[d]] = runs[i]
			count[d]++
		}
		runs, buf = buf, runs
	}
	for shift := 0; shift < 32; shift += 8 {
		pass(func(r *run) byte { return byte(uint32(r.job) >> shift) })
	}
	for shift := 0; shift < 32; shift += 8 {
		pass(func(r *run) byte { return byte(uint32(r.n0) >> shift) })
	}
	for shift := 0; shift < 64; shift += 8 {
		pass(func(r *run) byte { return byte(r.key >> shift) })
	}
	return runs
}
