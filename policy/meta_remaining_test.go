package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/wire"
)

// plannedOf is P, the planned batch size of every epoch.
func plannedOf(m *swMeta) []int {
	var out []int
	for _, sg := range m.segs {
		for len(out) < int(sg.end) {
			out = append(out, m.modes[sg.mode])
		}
	}
	return out
}

// dursOf is D, the calibrated duration of every epoch.
func dursOf(m *swMeta) []float64 {
	var out []float64
	for s, sg := range m.segs {
		for len(out) < int(sg.end) {
			out = append(out, m.durOf(s))
		}
	}
	return out
}

// remainingTextbook is spec §4.3 step by step, as the policy computed it
// before remaining kept its posterior between calls: maps, one increment
// per observed epoch, one decrement per observation.
func remainingTextbook(m *swMeta, p int) float64 {
	planned, durs := plannedOf(m), dursOf(m)
	obs := planned[:min(p, m.epochs-1)+1]
	post := map[int]float64{}
	for _, b := range m.modes {
		post[b] = float64(m.epochs) / float64(len(m.modes))
	}
	for _, b := range obs {
		post[b]++
	}
	total := 0.0
	for _, b := range m.modes {
		total += post[b]
	}
	n := map[int]float64{}
	for _, b := range m.modes {
		n[b] = float64(m.epochs) * post[b] / total
	}
	for _, b := range obs {
		if n[b] >= 1 {
			n[b]--
		}
	}
	rem := m.epochs - m.epoch
	sumN := 0.0
	for _, b := range m.modes {
		sumN += n[b]
	}
	infl := math.Max(math.Floor(sumN+1), float64(rem))
	if infl <= 0 || rem <= 0 {
		return 1
	}
	est := 0.0
	for _, b := range m.modes {
		s, k := 0.0, 0
		for e, pb := range planned {
			if pb == b {
				s += durs[e]
				k++
			}
		}
		if k > 0 {
			est += n[b] * (s / float64(k))
		}
	}
	return est * float64(rem) / infl
}

// TestRemaining_IncrementalEqualsTheTextbookBitForBit: on random schedules
// of 1 to 7 batch-size modes (fractional priors α = E/|M|), up to 3,000
// epochs, with the epoch moving forward, back and jumping, and calibration
// changing the durations in between, the kept-posterior estimate has the
// bits of the step-by-step one, and the running epoch sums (epochSeconds,
// doneSeconds) those of sums taken afresh.
func TestRemaining_IncrementalEqualsTheTextbookBitForBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 9000))
	sizes := []int{8, 16, 32, 64, 128, 256, 512}
	for trial := range 300 {
		E := 1 + rng.IntN(3000)
		nm := 1 + rng.IntN(len(sizes))
		planned := make([]int, E)
		secs := make([]float64, E)
		runs := trial%2 == 1 // half the schedules in runs of equal epochs, as declared ones are
		for e := range planned {
			planned[e] = sizes[rng.IntN(nm)]
			secs[e] = 1 + 500*rng.Float64()
			if runs && e > 0 && rng.IntN(20) > 0 {
				planned[e], secs[e] = planned[e-1], secs[e-1]
			}
		}
		m := metaFor(planned, secs)
		for step := range 40 {
			switch rng.IntN(4) {
			case 0: // jump anywhere, past the end included
				m.epoch = rng.IntN(E + 2)
			case 1:
				m.calibrate([]Measurement{{Round: 1 + rng.IntN(50), Throughput: 0.1 + 10*rng.Float64(), BatchSize: planned[0]}}, 120)
			default: // move forward a little
				m.epoch = min(E+1, m.epoch+rng.IntN(1+E/10))
			}
			p := m.epoch
			if got, want := m.remaining(p), remainingTextbook(m, p); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("trial %d step %d (E=%d, %d modes, p=%d): %v, textbook %v", trial, step, E, nm, p, got, want)
			}
			sum := func(d []float64) float64 {
				s := 0.0
				for _, v := range d {
					s += v
				}
				return s
			}
			hi := min(m.epoch, E-1)
			if got, want := m.epochSeconds(), sum(dursOf(m)[:hi+1])/float64(hi+1); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("trial %d step %d: epochSeconds %v, summed %v", trial, step, got, want)
			}
			if got, want := m.doneSeconds(), sum(dursOf(m)[:min(m.epoch, E)]); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("trial %d step %d: doneSeconds %v, summed %v", trial, step, got, want)
			}
		}
	}
}

// BenchmarkTarget_ThirtyEstimates: the fair-share target of a job with 30
// estimates, computed for every active job every round.
func BenchmarkTarget_ThirtyEstimates(b *testing.B) {
	m := metaFor([]int{32}, []float64{1})
	for i := range 30 {
		m.targets = append(m.targets, swTarget{round: 4 * i, value: 1000 + float64(i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = m.target(200)
	}
}

// TestMetaState_RestoredCachesGiveTheSameBits: a job's metadata saved
// mid-run and loaded again (caches rebuilt by derive) gives the estimates
// of the uninterrupted metadata, bit for bit; a saved schedule run at a
// batch size that is not one of the job's modes is refused with an error.
func TestMetaState_RestoredCachesGiveTheSameBits(t *testing.T) {
	planned := []int{32, 32, 64, 64, 128, 32, 64, 128, 128, 32}
	secs := []float64{10, 11, 7, 7.5, 3, 12, 6.5, 3.3, 3.1, 9}
	m := metaFor(planned, secs)
	m.epoch = 4
	m.calibrate([]Measurement{{Round: 2, Throughput: 9, BatchSize: 32}}, 120)
	_ = m.remaining(m.epoch) // warm the caches
	var e wire.Encoder
	m.append(&e)
	r := &swMeta{}
	d := wire.NewDecoder(e.Bytes())
	r.load(d)
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*swMeta{m, r} {
		x.epoch = 7
	}
	for name, f := range map[string]func(*swMeta) float64{
		"remaining":    func(x *swMeta) float64 { return x.remaining(x.epoch) },
		"epochSeconds": func(x *swMeta) float64 { return x.epochSeconds() },
		"doneSeconds":  func(x *swMeta) float64 { return x.doneSeconds() },
	} {
		if a, b := f(m), f(r); math.Float64bits(a) != math.Float64bits(b) {
			t.Errorf("%s: restored %v, uninterrupted %v", name, b, a)
		}
	}
	var e2 wire.Encoder
	m.segs[0].mode = int32(len(m.modes)) // a run at a mode the job does not have
	m.append(&e2)
	m.segs[0].mode = 0
	d = wire.NewDecoder(slices.Clone(e2.Bytes()))
	(&swMeta{}).load(d)
	if d.Err() == nil || !strings.Contains(d.Err().Error(), "not among the modes") {
		t.Fatalf("metadata whose modes miss a planned batch size loaded: err %v", d.Err())
	}
}
