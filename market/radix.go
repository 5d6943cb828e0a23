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
// sort (stable counting sorts of one digit each: first by (n0, job), then
// by the key's 11-bit digits), skipping the digits on which all runs
// agree. Runs listed by job, then n0 (as sortedItems makes them) are put
// in (n0, job) order by one counting pass over n0; others by the bytes of
// (n0, job) as one 64-bit number. The order is total over distinct runs,
// so it is the order any correct sort gives. It returns the sorted slice
// (runs or a buffer of its length).
func sortRuns(runs []run) []run {
	if len(runs) < 2 {
		return runs
	}
	buf := make([]run, len(runs))
	if byJob(runs) {
		if byN0(runs, buf) {
			runs, buf = buf, runs
		}
	} else {
		for shift := 0; shift < 64; shift += 8 { // (n0, job) as one 64-bit number
			if radixPass(runs, buf, shift, false) {
				runs, buf = buf, runs
			}
		}
	}
	for shift := 0; shift < 64; shift += keyBits {
		if radixPass(runs, buf, shift, true) {
			runs, buf = buf, runs
		}
	}
	return runs
}

const keyBits = 11 // digit of the key's passes

// byJob reports whether runs are listed by job, then n0, ascending.
func byJob(runs []run) bool {
	for i := 1; i < len(runs); i++ {
		a, b := &runs[i-1], &runs[i]
		if a.job > b.job || (a.job == b.job && a.n0 >= b.n0) {
			return false
		}
	}
	return true
}

// byN0 sorts runs into buf, stably, by n0 (nonnegative); false (nothing
// written) when all runs have the same n0.
func byN0(runs, buf []run) bool {
	top := int32(0)
	for i := range runs {
		top = max(top, runs[i].n0)
	}
	count := make([]int, top+2)
	for i := range runs {
		count[runs[i].n0+1]++
	}
	if count[runs[0].n0+1] == len(runs) {
		return false
	}
	for k := 1; k < len(count); k++ {
		count[k] += count[k-1]
	}
	for i := range runs {
		d := runs[i].n0
		buf[count[d]] = runs[i]
		count[d]++
	}
	return true
}

// secondary is the (n0, job) order of a run as one number.
func secondary(r *run) uint64 { return uint64(uint32(r.n0))<<32 | uint64(uint32(r.job)) }

// radixPass sorts runs into buf, stably, by the digit at shift of the key
// (byKey, keyBits wide) or the byte at shift of the secondary number;
// false (nothing written) when all runs have the same digit there.
func radixPass(runs, buf []run, shift int, byKey bool) bool {
	var count [1 << keyBits]int
	mask := uint64(1<<keyBits - 1)
	if !byKey {
		mask = 0xff
	}
	digit := func(r *run) uint64 {
		if byKey {
			return (r.key >> shift) & mask
		}
		return (secondary(r) >> shift) & mask
	}
	for i := range runs {
		count[digit(&runs[i])]++
	}
	if count[digit(&runs[0])] == len(runs) {
		return false
	}
	sum := 0
	for b, k := range count[:mask+1] {
		count[b] = sum
		sum += k
	}
	for i := range runs {
		d := digit(&runs[i])
		buf[count[d]] = runs[i]
		count[d]++
	}
	return true
}

// radixMin is the count below which a comparison sort beats sortPositive
// (whose digit histograms cost a fixed 6·2048 counters).
const radixMin = 4096

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
