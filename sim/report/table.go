package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/shockwave-sched/shockwave/sim"
)

// metric is one number of a result that the table compares across policies.
type metric struct {
	value  func(*sim.Result) float64
	higher bool // higher is better (otherwise lower is)
}

var (
	makespan  = metric{value: func(r *sim.Result) float64 { return r.Makespan }}
	avgJCT    = metric{value: func(r *sim.Result) float64 { return r.AvgJCT }}
	worstFTF  = metric{value: func(r *sim.Result) float64 { return r.WorstFTF }}
	unfair105 = metric{value: func(r *sim.Result) float64 { return r.UnfairPct105 }}
	unfair110 = metric{value: func(r *sim.Result) float64 { return r.UnfairPct110 }}
	util      = metric{value: func(r *sim.Result) float64 { return r.Utilization }, higher: true}
)

// best is the best value of m over results, ignoring NaN; NaN when there is
// none.
func (m metric) best(results []*sim.Result) float64 {
	b := math.NaN()
	for _, r := range results {
		v := m.value(r)
		switch {
		case math.IsNaN(v):
		case math.IsNaN(b), m.higher && v > b, !m.higher && v < b:
			b = v
		}
	}
	return b
}

// marked formats m for r with prec decimals and a * when r holds the best
// value (a space otherwise, so that right-aligned digits line up).
func (m metric) marked(r *sim.Result, best float64, prec int) string {
	v := m.value(r)
	if math.IsNaN(v) {
		return "— "
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if v == best {
		return s + "*"
	}
	return s + " "
}

// ratio is v divided by the best (lowest) value, as in "1.37×". A value
// equal to the best reads 1.00× even when both are 0; any other value over
// a best of 0 reads ∞; a NaN on either side reads —.
func ratio(v, best float64) string {
	switch {
	case math.IsNaN(v) || math.IsNaN(best):
		return "—"
	case v == best:
		return "1.00×"
	case best == 0:
		return "∞"
	}
	return strconv.FormatFloat(v/best, 'f', 2, 64) + "×"
}

// WriteTable writes results as aligned text for people: a one-line header
// naming the jobs and GPUs, then per policy the makespan and average JCT
// (seconds and hours), the worst ρ, the unfair shares (ρ > 1.05, ρ > 1.1),
// utilization and rounds, with * marking the best value of each column.
// When there are two results or more, a second table follows with each
// policy's makespan, average JCT, worst ρ and unfair share (ρ > 1.05)
// divided by the best policy's (see the package documentation for the
// conventions at 0). Results that differ in jobs or GPUs get their own
// columns for them.
func WriteTable(w io.Writer, results []*sim.Result) error {
	if err := check(results); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	desc, uniform := workload(results)
	if len(results) == 0 {
		fmt.Fprintln(bw, "no results")
		return flush(bw)
	}
	fmt.Fprintf(bw, "%s, %d %s; * = best in column; %% ρ>x = share of jobs with ρ > x\n\n",
		desc, len(results), plural(len(results), "policy", "policies"))
	writeAligned(bw, metricRows(results, uniform))
	if len(results) > 1 {
		fmt.Fprintln(bw)
		fmt.Fprintln(bw, "ratio to the best policy (lower is better; the best reads 1.00×):")
		fmt.Fprintln(bw)
		writeAligned(bw, ratioRows(results))
	}
	return flush(bw)
}

func flush(bw *bufio.Writer) error {
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: write table: %w", err)
	}
	return nil
}

func metricRows(results []*sim.Result, uniform bool) [][]string {
	head := []string{"policy"}
	if !uniform {
		head = append(head, "jobs", "GPUs")
	}
	// Marked columns end in a space or *, so their headers do too.
	head = append(head, "makespan s ", "", "avg JCT s ", "", "worst ρ ",
		"% ρ>1.05 ", "% ρ>1.1 ", "util ", "rounds")
	rows := [][]string{head}
	bm, bj, bf := makespan.best(results), avgJCT.best(results), worstFTF.best(results)
	b5, b10, bu := unfair105.best(results), unfair110.best(results), util.best(results)
	for _, r := range results {
		row := []string{label(r.Policy)}
		if !uniform {
			row = append(row, strconv.Itoa(r.Jobs), strconv.Itoa(r.GPUs))
		}
		row = append(row,
			makespan.marked(r, bm, 1), hours(r.Makespan),
			avgJCT.marked(r, bj, 1), hours(r.AvgJCT),
			worstFTF.marked(r, bf, 3),
			unfair105.marked(r, b5, 2), unfair110.marked(r, b10, 2),
			util.marked(r, bu, 3), strconv.Itoa(r.Rounds))
		rows = append(rows, row)
	}
	return rows
}

func hours(seconds float64) string {
	if math.IsNaN(seconds) {
		return "—"
	}
	return strconv.FormatFloat(seconds/3600, 'f', 2, 64) + " h"
}

func ratioRows(results []*sim.Result) [][]string {
	rows := [][]string{{"policy", "makespan", "avg JCT", "worst ρ", "% ρ>1.05"}}
	ms := []metric{makespan, avgJCT, worstFTF, unfair105}
	bests := make([]float64, len(ms))
	for i, m := range ms {
		bests[i] = m.best(results)
	}
	for _, r := range results {
		row := []string{label(r.Policy)}
		for i, m := range ms {
			row = append(row, ratio(m.value(r), bests[i]))
		}
		rows = append(rows, row)
	}
	return rows
}

// writeAligned prints rows as columns two spaces apart, the first column
// flush left and the others flush right. Widths count runes, so ρ, × and —
// take one column each.
func writeAligned(w io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		b.Reset()
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i == 0 {
				b.WriteString(cell + pad)
				continue
			}
			b.WriteString("  " + pad + cell)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
