package market

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestTwins_GroupsAsAMapKeyedByTheFields checks twins against grouping by
// the job with its ID blanked as a map key (Go's == on every field: −0
// equals +0), on random jobs drawn from a few values so that many are
// identical.
func TestTwins_GroupsAsAMapKeyedByTheFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 2))
	vals := []float64{0, math.Copysign(0, -1), 1, 2.5}
	for trial := range 200 {
		jobs := make([]Job, rng.IntN(60))
		for c := range jobs {
			pick := func() float64 { return vals[rng.IntN(len(vals))] }
			jobs[c] = Job{ID: fmt.Sprint(c), Workers: 1 + rng.IntN(2), Epochs: 1 + pick(), Progress: pick(),
				EpochSeconds: 1 + pick(), Remaining: pick(), FairFinish: 1 + pick()}
		}
		byKey := map[Job][]int{}
		for c := range jobs {
			j := jobs[c]
			j.ID = ""
			byKey[j] = append(byKey[j], c)
		}
		var want [][]int
		for _, g := range byKey {
			if len(g) > 1 {
				want = append(want, g)
			}
		}
		var got [][]int
		for _, g := range twins(jobs) {
			if len(g) > 1 {
				got = append(got, g)
			}
		}
		order := func(a, b []int) int { return a[0] - b[0] }
		slices.SortFunc(want, order)
		slices.SortFunc(got, order)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: groups %v, want %v", trial, got, want)
		}
	}
}
