package pollux

import (
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
)

func benchWorkload(b *testing.B, spec Spec) {
	dir, _ := loadPublished(b)
	apps := mustApps(b)
	rows := loadWorkload(b, dir, 3, apps)
	var iso map[string]Isolated
	if spec.Batch != "" {
		var err error
		if iso, err = IsolatedRuns(rows, Config{Apps: apps}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pol, setup, err := NewPolicy(spec, Options{Seed: uint64(i + 1)}, iso)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Run(Config{Workload: rows, Apps: apps, Policy: pol, Setup: setup}); err != nil {
			b.Fatal(err)
		}
	}
}

// One Pollux run of workload 3 (160 jobs, 16×4 GPUs, GA every 60 s).
func BenchmarkPolluxWorkload3(b *testing.B) { benchWorkload(b, Spec{Policy: "pollux"}) }

// One Tiresias run of workload 3.
func BenchmarkTiresiasWorkload3(b *testing.B) { benchWorkload(b, Spec{Policy: "tiresias"}) }

// One Optimus run of workload 3.
func BenchmarkOptimusWorkload3(b *testing.B) { benchWorkload(b, Spec{Policy: "optimus"}) }

// One Shockwave run of workload 3, jobs adapting their batch sizes.
func BenchmarkShockwaveAgentWorkload3(b *testing.B) {
	benchWorkload(b, Spec{Policy: "shockwave", Batch: BatchAgent})
}

// The whole Pollux table of make results-pollux: workloads 1–6, each with
// pollux (seed 1), optimus, tiresias and shockwave, gavel and themis in
// both batch modes, with the isolated runs for ρ; runs in parallel up to
// GOMAXPROCS, as simulate does.
func BenchmarkPolluxTable(b *testing.B) {
	dir, _ := loadPublished(b)
	apps := mustApps(b)
	specs := []Spec{{Policy: "pollux"}, {Policy: "optimus"}, {Policy: "tiresias"}}
	for _, p := range []string{"shockwave", "gavel", "themis"} {
		specs = append(specs, Spec{Policy: p, Batch: BatchTrace}, Spec{Policy: p, Batch: BatchAgent})
	}
	sw := policy.DefaultShockwaveConfig()
	sw.Info = policy.InfoOnline
	o := Options{Apps: apps, Seed: 1, Policy: policy.Options{Config: sw}}
	var rows [6][]WorkloadRow
	for k := range rows {
		rows[k] = loadWorkload(b, dir, k+1, apps)
	}
	b.ResetTimer()
	for range b.N {
		for k := range rows {
			if _, err := Compare(rows[k], specs, o); err != nil {
				b.Fatal(err)
			}
		}
	}
}
