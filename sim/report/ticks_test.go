package report

import (
	"math"
	"slices"
	"testing"

	"gonum.org/v1/plot"
)

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t.Label)
		}
	}
	slices.Sort(out)
	return out
}

func TestNiceTicks_StepsOfOneTwoFive(t *testing.T) {
	for _, c := range []struct {
		lo, hi  float64
		integer bool
		want    []string
	}{
		{0, 9.4, false, []string{"0", "2", "4", "6", "8"}},
		{0, 1, false, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{0, 119, true, []string{"0", "100", "20", "40", "60", "80"}},
		{0, 2.12, true, []string{"0", "1", "2"}},
	} {
		got := labels(niceTicks{integer: c.integer}.Ticks(c.lo, c.hi))
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("[%v, %v] integer=%v: labels %v, want %v", c.lo, c.hi, c.integer, got, want)
		}
	}
}

func TestNiceTicks_CountAxisHasNoFractionalTicks(t *testing.T) {
	for _, tk := range (niceTicks{integer: true}).Ticks(0, 2.12) {
		if tk.Value != math.Trunc(tk.Value) {
			t.Errorf("tick at %v on a count axis", tk.Value)
		}
	}
}

func TestLog2Ticks_PowersOfTwoLabelledAsRatios(t *testing.T) {
	got := labels(log2Ticks{}.Ticks(math.Log2(0.2), math.Log2(8.1)))
	want := slices.Sorted(slices.Values([]string{"0.25", "0.5", "1", "2", "4", "8"}))
	if !slices.Equal(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	// Under two octaves the 1.5× marks are labelled too.
	got = labels(log2Ticks{}.Ticks(math.Log2(0.45), math.Log2(1.3)))
	want = slices.Sorted(slices.Values([]string{"0.5", "0.75", "1"}))
	if !slices.Equal(got, want) {
		t.Errorf("narrow: labels %v, want %v", got, want)
	}
}

func TestRatio_Conventions(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		v, best float64
		want    string
	}{
		{3, 2, "1.50×"},
		{2, 2, "1.00×"},
		{0, 0, "1.00×"},
		{5, 0, "∞"},
		{nan, 2, "—"},
		{2, nan, "—"},
		{14.83 * 5, 5, "14.83×"},
	} {
		if got := ratio(c.v, c.best); got != c.want {
			t.Errorf("ratio(%v, %v) = %s, want %s", c.v, c.best, got, c.want)
		}
	}
}

func TestLabel_PaperNames(t *testing.T) {
	for in, want := range map[string]string{
		"max_min_fairness": "Gavel", "finish_time_fairness": "Themis", "min_total_duration": "OSSP",
		"max_sum_throughput_perf": "MST", "gandiva_fair": "Gandiva-Fair", "allox": "AlloX",
		"shockwave": "Shockwave", "old_shockwave": "old_shockwave", "": "(unnamed)",
	} {
		if got := label(in); got != want {
			t.Errorf("label(%q) = %q, want %q", in, got, want)
		}
	}
}
