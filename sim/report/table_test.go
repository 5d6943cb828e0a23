package report_test

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/report"
)

func writeTable(t *testing.T, results []*sim.Result) string {
	t.Helper()
	var buf bytes.Buffer
	if err := report.WriteTable(&buf, results); err != nil {
		t.Fatalf("WriteTable: %v", err)
	}
	return buf.String()
}

// blocks splits a table into its header line and its aligned blocks.
func blocks(out string) (header string, tables [][]string) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header = lines[0]
	var cur []string
	for _, l := range lines[1:] {
		switch {
		case l == "":
			if len(cur) > 0 {
				tables = append(tables, cur)
			}
			cur = nil
		case strings.HasSuffix(l, ":"): // a caption
		default:
			cur = append(cur, l)
		}
	}
	if len(cur) > 0 {
		tables = append(tables, cur)
	}
	return header, tables
}

// row returns the fields of the row of table whose first field is name.
func row(t *testing.T, table []string, name string) []string {
	t.Helper()
	for _, l := range table {
		if f := strings.Fields(l); f[0] == name {
			return f
		}
	}
	t.Fatalf("no row %q in\n%s", name, strings.Join(table, "\n"))
	return nil
}

func TestWriteTable_ColumnsLineUp(t *testing.T) {
	_, tables := blocks(writeTable(t, threePolicies()))
	if len(tables) != 2 {
		t.Fatalf("%d blocks, want metrics and ratios", len(tables))
	}
	for b, table := range tables {
		width := utf8.RuneCountInString(table[0])
		for _, l := range table[1:] {
			// The last column is flush right, so equal widths mean every
			// column ends at the same place.
			if n := utf8.RuneCountInString(l); n != width {
				t.Errorf("block %d: line %q is %d runes wide, header %d", b, l, n, width)
			}
		}
		// Every value after the policy name ends at the same rune offset
		// (a trailing * is a mark, not part of the value).
		ends := func(l string) []int {
			var out []int
			rs := []rune(strings.ReplaceAll(l, "*", " ") + " ")
			for i := 1; i < len(rs); i++ {
				if rs[i] == ' ' && rs[i-1] != ' ' {
					out = append(out, i)
				}
			}
			return out[1:]
		}
		want := ends(table[1])
		for _, l := range table[2:] {
			if got := ends(l); !slices.Equal(got, want) {
				t.Errorf("block %d: cell ends %v in %q, want %v", b, got, l, want)
			}
		}
	}
}

func TestWriteTable_HeaderNamesJobsAndGPUs(t *testing.T) {
	header, _ := blocks(writeTable(t, threePolicies()))
	if !strings.HasPrefix(header, "4 jobs, 2 GPUs, 3 policies") {
		t.Fatalf("header %q", header)
	}
}

func TestWriteTable_RatiosDivideByTheBest(t *testing.T) {
	_, tables := blocks(writeTable(t, threePolicies()))
	ratios := tables[1]
	want := map[string][]string{
		// makespan, avg JCT, worst ρ, % ρ>1.05
		"Shockwave": {"1.00×", "1.20×", "1.00×", "1.00×"},
		"Gavel":     {"1.50×", "1.33×", "2.00×", "2.00×"},
		"MST":       {"1.25×", "1.00×", "3.00×", "3.00×"},
	}
	for name, w := range want {
		if got := row(t, ratios, name)[1:]; !slices.Equal(got, w) {
			t.Errorf("%s ratios = %v, want %v", name, got, w)
		}
	}
}

func TestWriteTable_StarMarksTheBestOfEachColumn(t *testing.T) {
	_, tables := blocks(writeTable(t, threePolicies()))
	m := tables[0]
	sw, mst := row(t, m, "Shockwave"), row(t, m, "MST")
	for _, c := range []string{"3600.0*", "1.250*", "25.00*", "0.900*"} {
		if !slices.Contains(sw, c) {
			t.Errorf("Shockwave row %v lacks %s", sw, c)
		}
	}
	if !slices.Contains(mst, "1500.0*") {
		t.Errorf("MST row %v lacks the best average JCT mark", mst)
	}
	// % ρ>1.1: Shockwave 25 is best; Gavel and MST tie at 50, unmarked.
	if n := strings.Count(strings.Join(m[1:], "\n"), "*"); n != 6 {
		t.Errorf("%d marks, want one in each of six columns", n)
	}
}

func TestWriteTable_ZeroBestTiesReadOneOthersInfinity(t *testing.T) {
	rs := threePolicies()
	rs[0].UnfairPct105, rs[1].UnfairPct105 = 0, 0
	_, tables := blocks(writeTable(t, rs))
	for name, want := range map[string]string{"Shockwave": "1.00×", "Gavel": "1.00×", "MST": "∞"} {
		if got := row(t, tables[1], name)[4]; got != want {
			t.Errorf("%s unfair ratio = %s, want %s", name, got, want)
		}
	}
}

func TestWriteTable_NaNReadsDashAndIsNeverBest(t *testing.T) {
	rs := threePolicies()
	rs[2].AvgJCT = math.NaN()
	_, tables := blocks(writeTable(t, rs))
	if got := row(t, tables[0], "MST"); !slices.Contains(got, "—") {
		t.Errorf("MST row %v has no dash for NaN", got)
	}
	if got := row(t, tables[0], "Shockwave"); !slices.Contains(got, "1800.0*") {
		t.Errorf("Shockwave row %v: best average JCT not marked once NaN is ignored", got)
	}
	if got := row(t, tables[1], "MST")[2]; got != "—" {
		t.Errorf("MST JCT ratio = %s, want —", got)
	}
}

func TestWriteTable_SingleResultHasNoRatioBlock(t *testing.T) {
	header, tables := blocks(writeTable(t, threePolicies()[:1]))
	if !strings.Contains(header, "1 policy;") || len(tables) != 1 {
		t.Fatalf("header %q, %d blocks", header, len(tables))
	}
	if got := row(t, tables[0], "Shockwave"); !slices.Contains(got, "3600.0*") {
		t.Errorf("single result not marked best: %v", got)
	}
}

func TestWriteTable_MixedWorkloadsGetColumns(t *testing.T) {
	rs := threePolicies()
	rs[1].Jobs, rs[1].GPUs = 120, 32
	header, tables := blocks(writeTable(t, rs))
	if !strings.HasPrefix(header, "mixed workloads") {
		t.Errorf("header %q", header)
	}
	if got := row(t, tables[0], "Gavel")[1:3]; !slices.Equal(got, []string{"120", "32"}) {
		t.Errorf("jobs, GPUs = %v", got)
	}
}

func TestWriteTable_EmptyAndNil(t *testing.T) {
	if got := writeTable(t, nil); got != "no results\n" {
		t.Errorf("no results: %q", got)
	}
	if err := report.WriteTable(&bytes.Buffer{}, []*sim.Result{nil}); err == nil {
		t.Error("nil result: no error")
	}
	if err := report.WriteTable(failingWriter{}, threePolicies()); err == nil {
		t.Error("write error not reported")
	}
}

func TestWriteTable_UnknownPolicyKeepsItsName(t *testing.T) {
	rs := threePolicies()
	rs[2].Policy = "old_shockwave"
	_, tables := blocks(writeTable(t, rs))
	row(t, tables[0], "old_shockwave")
}
