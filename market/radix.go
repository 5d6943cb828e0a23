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
// sort (stable counting sorts of one byte each: the bytes of (n0, job) as
// one 64-bit number, then the key's), skipping the bytes on which all runs
// agree. The
// order is total over distinct runs, so it is the order any correct sort
// gives. It returns the sorted slice (runs or a buffer of its length).
func sortRuns(runs []run) []run {
	if len(runs) < 2 {
		return runs
	}
	buf := make([]run, len(runs))
	var count [256]int
	for shift := 0; shift < 64; shift += 8 { // (n0, job) as one 64-bit number
		if radixPass(runs, buf, &count, shift, false) {
			runs, buf = buf, runs
		}
	}
	for shift := 0; shift < 64; shift += 8 {
		if radixPass(runs, buf, &count, shift, true) {
			runs, buf = buf, runs
		}
	}
	return runs
}

// secondary is the (n0, job) order of a run as one number.
func secondary(r *run) uint64 { return uint64(uint32(r.n0))<<32 | uint64(uint32(r.job)) }

// radixPass sorts runs into buf, stably, by the byte at shift of the key
// (byKey) or of the secondary number; false (nothing written) when all
// runs have the same byte there.
func radixPass(runs, buf []run, count *[256]int, shift int, byKey bool) bool {
	clear(count[:])
	if byKey {
		for i := range runs {
			count[byte(runs[i].key>>shift)]++
		}
	} else {
		for i := range runs {
			count[byte(secondary(&runs[i])>>shift)]++
		}
	}
	for _, k := range count {
		if k == len(runs) {
			return false
		}
	}
	sum := 0
	for b, k := range count {
		count[b] = sum
		sum += k
	}
	if byKey {
		for i := range runs {
			d := byte(runs[i].key >> shift)
			buf[count[d]] = runs[i]
			count[d]++
		}
	} else {
		for i := range runs {
			d := byte(secondary(&runs[i]) >> shift)
			buf[count[d]] = runs[i]
			count[d]++
		}
	}
	return true
}

// sortPositive sorts the bit patterns of positive floats (+Inf included),
// which order as the floats do, ascending: a least-significant-digit radix
// sort, 11 bits per pass, all histograms counted in one read, skipping the
// digits on which all values agree. It returns the sorted slice (v or a
// buffer of its length).
func sortPositive(v []uint64) []uint64 {
	const bits, passes = 11, 6
	if len(v) < 2 {
		return v
	}
	var count [passes][1 << bits]int
	for _, x := range v {
		for p := range passes {
			count[p][(x>>(p*bits))&(1<<bits-1)]++
		}
	}
	buf := make([]uint64, len(v))
	for p := range passes {
		c := &count[p]
		if c[(v[0]>>(p*bits))&(1<<bits-1)] == len(v) {
			continue // every value has this digit
		}
		sum := 0
		for d, k := range c {
			c[d] = sum
			sum += k
		}
		for _, x := range v {
			d := (x >> (p * bits)) & (1<<bits - 1)
			buf[c[d]] = x
			c[d]++
		}
		v, buf = buf, v
	}
	return v
}
