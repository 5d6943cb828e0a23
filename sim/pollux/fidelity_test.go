package pollux

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
)

// published holds the artifact's published average and per-job JCTs of
// load 1.0, workloads 1–6 (shared/data/pollux/published-avg-jct.json).
type published struct {
	Avg  map[string]map[string]map[string]float64
	JCTs map[string]map[string]map[string]map[string]float64
}

func (p published) avg(pol string, k int) float64 { return p.Avg[pol]["1.0"][workloadName(k)] }

func workloadName(k int) string { return fmt.Sprintf("workload-%d", k) }

func loadPublished(t testing.TB) (dir string, pub published) {
	t.Helper()
	dir = filepath.Join(shareddata.Dir(t), "pollux")
	raw, err := os.ReadFile(filepath.Join(dir, "published-avg-jct.json"))
	if err != nil {
		t.Skipf("Pollux reference data not found (%v): place shared/data/pollux beside the checkout", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	pub.Avg = map[string]map[string]map[string]float64{}
	for _, p := range Native {
		var v map[string]map[string]float64
		if err := json.Unmarshal(m[p], &v); err != nil {
			t.Fatal(err)
		}
		pub.Avg[p] = v
	}
	if err := json.Unmarshal(m["jcts"], &pub.JCTs); err != nil {
		t.Fatal(err)
	}
	return dir, pub
}

func loadWorkload(t testing.TB, dir string, k int, apps Apps) []WorkloadRow {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "workloads", workloadName(k)+".csv"))
	if err != nil {
		t.Skipf("Pollux workload %d not found: %v", k, err)
	}
	defer f.Close()
	rows, err := ParseWorkload(f, apps)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func mustApps(t testing.TB) Apps {
	t.Helper()
	apps, err := BuiltinApps()
	if err != nil {
		t.Fatal(err)
	}
	return apps
}

func runNative(t testing.TB, rows []WorkloadRow, apps Apps, name string, seed uint64) *Result {
	t.Helper()
	pol, setup, err := NewPolicy(Spec{Policy: name}, Options{Seed: seed}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Run(Config{Workload: rows, Apps: apps, Policy: pol, Setup: setup})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Summarise(name, jobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func longTests(t *testing.T) {
	t.Helper()
	if os.Getenv("SHOCKWAVE_LONG") == "" {
		t.Skip("long run: set SHOCKWAVE_LONG=1")
	}
}

// The deterministic baselines reproduce the published average JCT of every
// load-1.0 workload within 5 % (spec §8.1).
func TestBaselines_MatchPublishedAverageJCTWithin5Percent(t *testing.T) {
	dir, pub := loadPublished(t)
	apps := mustApps(t)
	for k := 1; k <= 6; k++ {
		rows := loadWorkload(t, dir, k, apps)
		for _, name := range []string{"tiresias", "optimus"} {
			r := runNative(t, rows, apps, name, 0)
			want := pub.avg(name, k)
			dev := r.AvgJCT/want - 1
			t.Logf("workload %d %-8s ours %.1f published %.1f (%+.2f%%)", k, name, r.AvgJCT, want, 100*dev)
			if math.Abs(dev) > 0.05 {
				t.Errorf("workload %d %s: average JCT %.1f is %+.1f%% from the published %.1f", k, name, r.AvgJCT, 100*dev, want)
			}
		}
	}
}

// pollWorkloads is the workloads the long Pollux test runs:
// $SHOCKWAVE_POLLUX_WORKLOADS (comma-separated numbers, e.g. "2" while
// iterating), else 1–6.
func pollWorkloads(t *testing.T) []int {
	v := os.Getenv("SHOCKWAVE_POLLUX_WORKLOADS")
	if v == "" {
		return []int{1, 2, 3, 4, 5, 6}
	}
	var ks []int
	for _, f := range strings.Split(v, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > 6 {
			t.Fatalf("SHOCKWAVE_POLLUX_WORKLOADS=%q: %q is not a workload 1-6", v, f)
		}
		ks = append(ks, k)
	}
	return ks
}

// Pollux, averaged over five seeds, reproduces the published average JCT
// within 10 % on every workload and within 5 % on the mean of the six
// (spec §8.1, §9.1: the published runs are single unseeded runs). With
// $SHOCKWAVE_POLLUX_WORKLOADS naming fewer workloads, the mean is not
// checked.
func TestPollux_MatchesPublishedAverageJCTOverFiveSeeds(t *testing.T) {
	longTests(t)
	dir, pub := loadPublished(t)
	apps := mustApps(t)
	ks := pollWorkloads(t)
	var mu sync.Mutex
	avg := map[int]float64{}
	sem := make(chan struct{}, max(1, parallelism()))
	var wg sync.WaitGroup
	for _, k := range ks {
		rows := loadWorkload(t, dir, k, apps)
		for seed := uint64(1); seed <= 5; seed++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				r := runNative(t, rows, apps, "pollux", seed)
				t.Logf("workload %d seed %d: pollux average JCT %.1f", k, seed, r.AvgJCT)
				mu.Lock()
				avg[k] += r.AvgJCT / 5
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	ours, theirs := 0.0, 0.0
	for _, k := range ks {
		want := pub.avg("pollux", k)
		dev := avg[k]/want - 1
		t.Logf("workload %d pollux ours %.1f published %.1f (%+.2f%%)", k, avg[k], want, 100*dev)
		if math.Abs(dev) > 0.10 {
			t.Errorf("workload %d: Pollux's 5-seed average JCT %.1f is %+.1f%% from the published %.1f", k, avg[k], 100*dev, want)
		}
		ours += avg[k] / 6
		theirs += want / 6
	}
	if len(ks) < 6 {
		return
	}
	dev := ours/theirs - 1
	t.Logf("mean of workloads 1-6: ours %.1f published %.1f (%+.2f%%)", ours, theirs, 100*dev)
	if math.Abs(dev) > 0.05 {
		t.Errorf("mean over workloads 1-6: %.1f is %+.1f%% from the published %.1f", ours, 100*dev, theirs)
	}
}

// With the artifact's Delaunay interpolant (spec §2.3), Tiresias, which is
// deterministic, gives every job of workloads 1–6 exactly its published
// JCT, and Optimus gives at least 90 % of them exactly (146–158 of 160 here;
// the residual is not explained yet).
func TestBaselines_ReproducePublishedPerJobJCTs(t *testing.T) {
	dir, pub := loadPublished(t)
	apps := mustApps(t)
	for k := 1; k <= 6; k++ {
		rows := loadWorkload(t, dir, k, apps)
		for _, name := range []string{"tiresias", "optimus"} {
			r := runNative(t, rows, apps, name, 0)
			want := pub.JCTs[name]["1.0"][workloadName(k)]
			same := 0
			for job, w := range want {
				if float64(r.JCT[job]) == w {
					same++
				}
			}
			t.Logf("workload %d %-8s: %d of %d jobs have the published JCT", k, name, same, len(want))
			if len(want) != len(rows) {
				t.Fatalf("published workload %d %s has %d jobs, the workload %d", k, name, len(want), len(rows))
			}
			if name == "tiresias" && same != len(want) || float64(same) < 0.9*float64(len(want)) {
				t.Errorf("workload %d %s: only %d of %d jobs have the published JCT", k, name, same, len(want))
			}
		}
	}
}
