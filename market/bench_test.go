package market_test

import (
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// benchSolve solves a fixed set of instances round-robin. The settings are
// the spec's configuration for the cluster size (§4.9). Besides the wall
// time it reports the process's CPU time per solve (cpu-ns/op).
func benchSolve(b *testing.B, n, gpus int, k, lambda float64) {
	benchSolveRule(b, n, gpus, k, lambda, market.FairnessRelax)
}

func benchSolveRule(b *testing.B, n, gpus int, k, lambda float64, rule market.Fairness) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(gpus)))
	var probs []market.Problem
	for i := 0; i < 8; i++ {
		probs = append(probs, largeProblem(rng, n, gpus))
	}
	s := market.DefaultSettings()
	s.K, s.Lambda, s.Fairness = k, lambda, rule
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	i := 0
	for b.Loop() {
		if _, err := market.Solve(probs[i%len(probs)], s); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportCPU(b, cpu)
}

func BenchmarkSolve_N50_G32(b *testing.B)   { benchSolve(b, 50, 32, 1e-3, 12) }
func BenchmarkSolve_N300_G128(b *testing.B) { benchSolve(b, 300, 128, 1e-3, 15) }
func BenchmarkSolve_N900_G256(b *testing.B) { benchSolve(b, 900, 256, 1e5, 5) }

// The scales of docs/scale.md, with the 256-GPU configuration's settings.
func BenchmarkSolve_N3600_G1024(b *testing.B) { benchSolve(b, 3600, 1024, 1e5, 5) }
func BenchmarkSolve_N9000_G2560(b *testing.B) { benchSolve(b, 9000, 2560, 1e5, 5) }

// The binding fairness rule (fair.go) on the same instances.
func BenchmarkSolveTightest_N300_G128(b *testing.B) {
	benchSolveRule(b, 300, 128, 1e-3, 15, market.FairnessTightest)
}
func BenchmarkSolveTightest_N900_G256(b *testing.B) {
	benchSolveRule(b, 900, 256, 1e5, 5, market.FairnessTightest)
}
