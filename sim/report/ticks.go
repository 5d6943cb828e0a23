package report

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// niceTicks labels about five to ten values at a step of 1, 2 or 5 times a
// power of ten, with an unlabelled tick halfway between labels. On a count
// axis (integer set) the step is at least 1 and minor ticks fall on
// integers only.
type niceTicks struct{ integer bool }

func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: formatTick(lo, 0)}}
	}
	step := niceStep((hi - lo) / 6)
	if t.integer {
		step = math.Max(step, 1)
	}
	minor := !t.integer || step >= 2 && math.Mod(step, 2) == 0
	prec := max(0, -int(math.Floor(math.Log10(step))))
	var ticks []plot.Tick
	first := math.Ceil(lo/step-1e-9) * step
	for k := 0; ; k++ {
		v := first + float64(k)*step
		if v > hi+step*1e-9 {
			break
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v, prec)})
		if mid := v + step/2; minor && mid <= hi {
			ticks = append(ticks, plot.Tick{Value: mid})
		}
	}
	if mid := first - step/2; minor && mid >= lo {
		ticks = append(ticks, plot.Tick{Value: mid})
	}
	return ticks
}

// niceStep is the smallest of 1, 2, 5 × 10^k that is at least raw.
func niceStep(raw float64) float64 {
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw*(1-1e-9) {
			return m * pow
		}
	}
	return 10 * pow
}

func formatTick(v float64, prec int) string {
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// log2Ticks marks an axis that carries log2 of a ratio such as ρ: labelled
// ticks at the powers of two (…, 0.25, 0.5, 1, 2, 4, …), shown as the ratio
// itself, and unlabelled ticks at 1.5 times each. (Plotting log2 values on
// a linear axis, rather than using plot.LogScale, keeps the axis label
// centred; gonum places it at the arithmetic midpoint of the data range.)
// On a narrow range (under two octaves) the 1.5× ticks get labels too.
type log2Ticks struct{}

func (log2Ticks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	mid := math.Log2(1.5)
	narrow := hi-lo < 2
	for e := math.Floor(lo); e <= hi; e++ {
		if e >= lo {
			ticks = append(ticks, plot.Tick{Value: e, Label: ratioLabel(e)})
		}
		if m := e + mid; m >= lo && m <= hi {
			t := plot.Tick{Value: m}
			if narrow {
				t.Label = ratioLabel(m)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// ratioLabel prints 2^e with at most three significant digits.
func ratioLabel(e float64) string {
	return strconv.FormatFloat(math.Exp2(e), 'g', 3, 64)
}
