package pollux

import (
	"testing"
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
