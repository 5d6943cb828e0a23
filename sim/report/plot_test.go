package report_test

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/report"
)

var pngFiles = []string{report.FTFCDFFile, report.ClusterFile, report.SummaryFile}

// checkPNGs asserts that dir holds the three charts as decodable, non-trivial
// PNG images.
func checkPNGs(t *testing.T, dir string) {
	t.Helper()
	for _, name := range pngFiles {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 400 {
			t.Errorf("%s: %v is too small to read", name, b)
		}
	}
}

func TestPlot_WritesThreeValidPNGsIntoANewDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := report.Plot(dir, threePolicies()); err != nil {
		t.Fatal(err)
	}
	checkPNGs(t, dir)
}

func TestPlot_SameInputSameBytes(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if err := report.Plot(d, threePolicies()); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range pngFiles {
		x, _ := os.ReadFile(filepath.Join(a, name))
		y, _ := os.ReadFile(filepath.Join(b, name))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two calls", name)
		}
	}
}

func TestPlot_SingleResultAndEmptySeries(t *testing.T) {
	one := threePolicies()[:1]
	empty := &sim.Result{Policy: "nothing", GPUs: 2, Jobs: 0}
	for name, rs := range map[string][]*sim.Result{
		"single":       one,
		"empty series": {one[0], empty},
		"only empty":   {empty},
	} {
		dir := t.TempDir()
		if err := report.Plot(dir, rs); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		checkPNGs(t, dir)
	}
}

func TestPlot_ErrorsSayWhatFailed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := threePolicies()
	bad[1].RoundBusy = bad[1].RoundBusy[:2]
	for name, c := range map[string]struct {
		dir     string
		results []*sim.Result
		want    string
	}{
		"no results":         {t.TempDir(), nil, "no results"},
		"nil result":         {t.TempDir(), []*sim.Result{nil}, "result 0 is nil"},
		"dir is a file":      {filepath.Join(file, "sub"), threePolicies(), "create plot directory"},
		"ragged round lists": {t.TempDir(), bad, "cluster.png: policy max_min_fairness: per-round series differ"},
	} {
		err := report.Plot(c.dir, c.results)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", name, err, c.want)
		}
	}
}
