package market_test

import (
	"fmt"

	"github.com/shockwave-sched/shockwave/market"
)

// Three 2-GPU jobs share 4 GPUs for a 4-round window: two fit in a round.
// The makespan term gives every round to the job with the most work left;
// bert and lstm have the same curves and split the rest, and the one
// further behind its fair share (larger ρ̃) runs first.
func ExampleSolve() {
	p := market.Problem{
		GPUs:   4,
		Round:  10,
		Rounds: 4,
		Jobs: []market.Job{
			{ID: "resnet", Workers: 2, Epochs: 40, Progress: 10, EpochSeconds: 90, Remaining: 2700, FairFinish: 9000},
			{ID: "bert", Workers: 2, Epochs: 30, Progress: 12, EpochSeconds: 100, Remaining: 1800, FairFinish: 30000},
			{ID: "lstm", Workers: 2, Epochs: 30, Progress: 12, EpochSeconds: 100, Remaining: 1800, FairFinish: 20000},
		},
	}
	r, err := market.Solve(p, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("status:", r.Status)
	for i, j := range p.Jobs {
		fmt.Printf("%-6s rounds=%d ρ̃=%.2f\n", j.ID, r.Rounds[i], r.Rho[i])
	}
	for t, jobs := range r.Schedule {
		fmt.Print("round ", p.Round+t, ":")
		for _, i := range jobs {
			fmt.Print(" ", p.Jobs[i].ID)
		}
		fmt.Println()
	}
	// Output:
	// status: Optimal
	// resnet rounds=4 ρ̃=0.43
	// bert   rounds=2 ρ̃=0.10
	// lstm   rounds=2 ρ̃=0.15
	// round 10: resnet lstm
	// round 11: resnet lstm
	// round 12: resnet bert
	// round 13: resnet bert
}
