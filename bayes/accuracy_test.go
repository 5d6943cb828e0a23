package bayes_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// publicTraces are the four traces of the original's experiments (spec §1)
// with the throughput table each was generated with.
var publicTraces = []struct{ file, table string }{
	{"120jobs-32gpus.trace", "tacc"},
	{"220jobs-64gpus.trace", "wisr"},
	{"460jobs-128gpus.trace", "wisr"},
	{"900jobs-256gpus.trace", "wisr"},
}

// accuracyRow is the APE summary of one checkpoint.
type accuracyRow struct {
	online, profile apeStats
	n               int
}

func accuracy(rs []scored) []accuracyRow {
	out := make([]accuracyRow, len(checkpoints))
	for c := range checkpoints {
		var on, pr []float64
		for _, s := range rs {
			if s.checkpoint == c {
				on = append(on, ape(s.online.Remaining.Mean, s.truth))
				pr = append(pr, ape(s.profile, s.truth))
			}
		}
		out[c] = accuracyRow{percentiles(on), percentiles(pr), len(on)}
	}
	return out
}

func formatAccuracy(name string, rows []accuracyRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: APE of remaining isolated runtime (online vs profile Dirichlet)\n", name)
	fmt.Fprintf(&b, "  progress    n   online med  online p90   profile med  profile p90\n")
	for c, r := range rows {
		fmt.Fprintf(&b, "  %4.0f%%   %4d     %6.1f%%     %6.1f%%       %6.1f%%      %6.1f%%\n",
			100*checkpoints[c], r.n, 100*r.online.median, 100*r.online.p90, 100*r.profile.median, 100*r.profile.p90)
	}
	return b.String()
}

// TestAccuracy_OnlineNoWorseThanProfileOnPublicTraces replays the four
// public traces (isolated trajectories with the simulator's rescale rules,
// jobs completing in finish order on a shared clock) and checks that the
// median APE of Remaining.Mean at 10/25/50/75/90 % progress is no higher
// than the profile-based Dirichlet estimate's (spec §4.3). Jobs never
// declare a throughput here: everything is learned from live events and
// peers.
func TestAccuracy_OnlineNoWorseThanProfileOnPublicTraces(t *testing.T) {
	dir := shareddata.Dir(t)
	for _, tr := range publicTraces {
		t.Run(tr.file, func(t *testing.T) {
			specs, err := workload.ReadTraceFile(filepath.Join(dir, "shockwave-traces", tr.file))
			if err != nil {
				t.Skipf("trace %s: %v", tr.file, err)
			}
			thr, err := workload.Builtin(tr.table)
			if err != nil {
				t.Fatal(err)
			}
			rows := accuracy(replay(specs, thr, replayOptions{seed: 1}))
			t.Log(formatAccuracy(tr.file, rows))
			for c, r := range rows {
				if r.online.median > r.profile.median {
					t.Errorf("at %.0f%% progress the online median APE %.1f%% exceeds the profile's %.1f%%",
						100*checkpoints[c], 100*r.online.median, 100*r.profile.median)
				}
			}
		})
	}
}

// TestAccuracy_GeneratedWorkload runs the same comparison on a generated
// workload (no shared data needed), with generous absolute bounds.
func TestAccuracy_GeneratedWorkload(t *testing.T) {
	thr, err := workload.Builtin("tacc")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := workload.Generate(300, 7, thr, workload.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rows := accuracy(replay(specs, thr, replayOptions{seed: 7}))
	t.Log(formatAccuracy("generated 300 jobs (tacc, seed 7)", rows))
	for c, r := range rows {
		if r.online.median > r.profile.median+0.01 {
			t.Errorf("at %.0f%% progress the online median APE %.1f%% exceeds the profile's %.1f%%",
				100*checkpoints[c], 100*r.online.median, 100*r.profile.median)
		}
	}
}
