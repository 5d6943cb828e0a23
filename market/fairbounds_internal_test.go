package market

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// rhoCandidatesBySort is rhoCandidates as it was written first: every
// value collected as a float, then a comparison sort and compaction.
func rhoCandidatesBySort(in *instance, m *model) []float64 {
	out := []float64{in.set.RhoMax}
	for c := range in.jobs {
		j, jm := &in.jobs[c], &m.jobs[c]
		for n := 0; n <= jm.hi; n++ {
			end := in.T
			if jm.r[n] <= 0 {
				end = n
			}
			rho := (in.delta*float64(in.R+end) + jm.r[n]/in.share) / j.FairFinish
			if rho > in.set.RhoMax {
				out = append(out, rho*(1+2*ftfTol))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func floats(bits []uint64) []float64 {
	out := make([]float64, len(bits))
	for k, b := range bits {
		out[k] = math.Float64frombits(b)
	}
	return out
}

// tightProblem is a random instance under the tightest rule, with fair
// finish targets spread so that some bounds ρ pack and others do not.
func tightProblem(rng *rand.Rand) (*instance, *model) {
	p := Problem{GPUs: 1 + rng.IntN(48), Round: rng.IntN(300), Rounds: 1 + rng.IntN(30)}
	for i := range 1 + rng.IntN(70) {
		e := float64(1 + rng.IntN(100))
		d := 10 + 500*rng.Float64()
		f := d * e * math.Pow(10, 2*rng.Float64()-1)
		if rng.IntN(4) == 0 {
			f = d * e * (0.05 + 0.1*rng.Float64()) // hopeless at small ρ
		}
		p.Jobs = append(p.Jobs, Job{ID: fmt.Sprint(i), Workers: 1 + rng.IntN(min(p.GPUs, 8)), Epochs: e,
			Progress: float64(rng.IntN(int(e))), EpochSeconds: d, Remaining: d * e * rng.Float64(),
			FairFinish: f})
	}
	s := DefaultSettings()
	s.Fairness = FairnessTightest
	s.RhoMax = 0.5 + rng.Float64()
	in := newInstance(&p, s)
	w := make([]float64, len(in.jobs))
	for c := range w {
		w[c] = 1 / float64(len(w)*in.T)
	}
	m := newModel(in, w, false)
	in.tight = true
	return in, m
}

// TestLowerBounds_ProbeAsTheDirectScan runs the tightest rule's bisection
// twice on random instances, with and without critical bounds: once with
// lowerBounds (scans resumed from the last packing probe, the failing job
// tried first) and once computing every bound from n = 0 with ftfLow at
// every probe, as the rule was first written. Every probe must answer the
// same and, when it packs, give the same bounds; the candidates must be
// those of the comparison sort.
func TestLowerBounds_ProbeAsTheDirectScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 2))
	var packed, failedJob, failedPack int
	for trial := range 400 {
		in, m := tightProblem(rng)
		rhos := floats(in.rhoCandidates(m))
		if want := rhoCandidatesBySort(in, m); !slices.Equal(rhos, want) {
			t.Fatalf("trial %d: %d candidates, want %d (%v…, want %v…)", trial, len(rhos), len(want),
				rhos[:min(5, len(rhos))], want[:min(5, len(want))])
		}
		pk, ref := newPacker(m), newPacker(m)
		lb := newLowerBounds(in, m) // one for both bisections, as start promises
		for _, crit := range []bool{true, false} {
			if in.crit = false; crit {
				in.critBounds()
			}
			lb.start()
			lo := make([]int, len(in.jobs))
			a, b := -1, len(rhos)
			for b-a > 1 {
				mid := (a + b) / 2
				got := lb.packs(pk, rhos[mid])
				want, noJob := true, false
				for c := range in.jobs {
					if lo[c] = in.ftfLow(&in.jobs[c], &m.jobs[c]); lo[c] < 0 {
						want, noJob = false, true
						break
					}
				}
				if want {
					want, _ = ref.check(lo)
				}
				if got != want {
					t.Fatalf("trial %d, crit %v, ρ %v: packs %v, want %v", trial, crit, rhos[mid], got, want)
				}
				switch {
				case got:
					packed++
					if !slices.Equal(lb.lo, lo) {
						t.Fatalf("trial %d, crit %v, ρ %v: bounds %v, want %v", trial, crit, rhos[mid], lb.lo, lo)
					}
					b = mid
				case noJob:
					failedJob++
					a = mid
				default:
					failedPack++
					a = mid
				}
			}
		}
	}
	if packed == 0 || failedJob == 0 || failedPack == 0 {
		t.Fatalf("probes: %d packed, %d failed for a job, %d failed to pack; want each", packed, failedJob, failedPack)
	}
	t.Logf("probes: %d packed, %d failed for a job, %d failed to pack", packed, failedJob, failedPack)
}

// TestSortPositive_OrdersAsTheComparisonSort checks the radix sort of
// positive floats' bit patterns against slices.Sort of the floats:
// subnormal, huge, +Inf, many equal values, and runs sharing high digits.
func TestSortPositive_OrdersAsTheComparisonSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 3))
	special := []float64{math.SmallestNonzeroFloat64, math.MaxFloat64, math.Inf(1), 1, 1.5, 1e-300, 1e300}
	for trial := range 300 {
		v := make([]float64, rng.IntN(3000))
		base := math.Pow(10, float64(rng.IntN(40)-20))
		for i := range v {
			switch rng.IntN(4) {
			case 0:
				v[i] = special[rng.IntN(len(special))]
			case 1:
				v[i] = base * (1 + float64(rng.IntN(8))*0x1p-40) // differ in low digits only
			default:
				v[i] = base * math.Exp(4*rng.NormFloat64())
			}
		}
		bits := make([]uint64, len(v))
		for i, x := range v {
			bits[i] = math.Float64bits(x)
		}
		got := sortPositive(bits)
		slices.Sort(v)
		for i := range v {
			if g := math.Float64frombits(got[i]); g != v[i] {
				t.Fatalf("trial %d: position %d holds %v, want %v", trial, i, g, v[i])
			}
		}
	}
}
