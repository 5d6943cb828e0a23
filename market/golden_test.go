package market_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// The golden plans: testdata/golden/plans.txt holds, for a fixed set of
// solves, the digest of each plan (planDigest: round counts, schedule,
// objective, relaxation and FTF bound) as the solver gave it when the file
// was written. The set is six market instances dumped from the 900-job /
// 256-GPU trace (testdata/golden/*.json.gz, `simulate --dump-instances`),
// each under both fairness rules, and generated problems: cluster-sized
// ones up to 9,000 jobs on 2,560 GPUs, ones with a dozen distinct gang
// widths or windows of 65 to 200 rounds, and small ones with wide or off-chain gangs, varied settings and
// branch and bound.
//
// A change that only makes the solver faster keeps every digest. A
// deliberate change of the plans rewrites the file:
//
//	MARKET_GOLDEN_UPDATE=1 go test ./market -run TestSolve_PlansMatchTheGoldenDigests

const goldenDir = "testdata/golden"

type goldenCase struct {
	name string
	p    market.Problem
	s    *market.Settings
}

// goldenCases builds the solves of the golden set, in a fixed order.
func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	var out []goldenCase
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden instances in %s (%v)", goldenDir, err)
	}
	for _, name := range files {
		p, s := readInstanceFile(t, name)
		for _, rule := range []market.Fairness{market.FairnessTightest, market.FairnessRelax} {
			sc := *s
			sc.Fairness = rule
			out = append(out, goldenCase{fmt.Sprintf("%s/%s", filepath.Base(name), rule), p, &sc})
		}
	}
	for _, size := range []struct{ n, g int }{{900, 256}, {3600, 1024}, {9000, 2560}} {
		rng := rand.New(rand.NewPCG(uint64(size.n), uint64(size.g)))
		p := largeProblem(rng, size.n, size.g)
		for _, rule := range []market.Fairness{market.FairnessTightest, market.FairnessRelax} {
			s := market.DefaultSettings()
			s.K, s.Lambda, s.Fairness = 1e5, 5, rule
			out = append(out, goldenCase{fmt.Sprintf("large-%d-%d/%s", size.n, size.g, rule), p, s})
		}
	}
	rng := rand.New(rand.NewPCG(2026, 16))
	for i := range 12 { // many distinct widths (the arrangement's shared width group)
		p := largeProblem(rng, 60+rng.IntN(300), []int{64, 96, 128}[rng.IntN(3)])
		for k := range p.Jobs {
			p.Jobs[k].Workers = 1 + rng.IntN(12)
		}
		s := market.DefaultSettings()
		s.Fairness = []market.Fairness{market.FairnessRelax, market.FairnessTightest}[i%2]
		out = append(out, goldenCase{fmt.Sprintf("widths-%02d/%s", i, s.Fairness), p, s})
	}
	for i, T := range []int{65, 100, 130, 200} { // windows longer than 64 rounds
		p := largeProblem(rng, 200+rng.IntN(200), []int{32, 64, 128}[rng.IntN(3)])
		p.Rounds = T
		s := market.DefaultSettings()
		s.Fairness = []market.Fairness{market.FairnessRelax, market.FairnessTightest}[i%2]
		out = append(out, goldenCase{fmt.Sprintf("rounds-%d/%s", T, s.Fairness), p, s})
	}
	for i := range 120 {
		p := mediumProblem(rng)
		if i%4 == 3 { // gang widths off a divisibility chain
			for k := range p.Jobs {
				p.Jobs[k].Workers = min(p.GPUs, []int{1, 2, 3}[rng.IntN(3)])
			}
		}
		s := randomSettings(rng)
		s.Gap = []float64{0, 1e-3}[rng.IntN(2)]
		s.Fairness = []market.Fairness{market.FairnessRelax, market.FairnessTightest}[rng.IntN(2)]
		out = append(out, goldenCase{fmt.Sprintf("medium-%03d/%s", i, s.Fairness), p, s})
	}
	return out
}

// TestSolve_PlansMatchTheGoldenDigests solves the golden set and compares
// every plan with the digest recorded in testdata/golden/plans.txt.
func TestSolve_PlansMatchTheGoldenDigests(t *testing.T) {
	if testing.Short() {
		t.Skip("solves 9,000-job problems")
	}
	cases := goldenCases(t)
	got := make([]string, len(cases))
	var branched, relaxed, raised int
	for i, c := range cases {
		r, err := market.Solve(c.p, c.s)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkReplayed(t, c.p, c.s, r)
		if r.Stats.Branches > 0 {
			branched++
		}
		if r.Relaxed {
			relaxed++
		}
		if r.RhoBound > c.s.RhoMax {
			raised++
		}
		got[i] = c.name + " " + planDigest(r)
	}
	t.Logf("%d solves: %d branched, %d relaxed, %d at a raised FTF bound", len(cases), branched, relaxed, raised)
	path := filepath.Join(goldenDir, "plans.txt")
	if os.Getenv("MARKET_GOLDEN_UPDATE") != "" {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d digests to %s", len(got), path)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		want = append(want, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Fatalf("%d golden digests recorded, %d solves in the set", len(want), len(got))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("plan differs: got %q, recorded %q", got[i], want[i])
		}
	}
	if !slices.Equal(got, want) {
		t.Logf("a deliberate change of the plans: MARKET_GOLDEN_UPDATE=1 rewrites %s", path)
	}
}
