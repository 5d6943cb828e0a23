package bayes

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/wire"
)

// floodFamilies completes n jobs in f, each of a model of its own, with
// the most epochs a job may imply, reporting all its steps at once (as a
// job with valid credentials and bad intent could): every one teaches
// three new family nodes every epoch it declares.
func floodFamilies(t *testing.T, f *Forecaster, from, n int) {
	t.Helper()
	for k := from; k < from+n; k++ {
		sp := JobSpec{ID: fmt.Sprint("flood-", k), Model: fmt.Sprint("m-", k), Mode: "gns", Workers: 1,
			InitialBatchSize: 32, DatasetSize: 320, TotalSteps: 10 * MaxJobEpochs}
		if err := f.Admit(sp); err != nil {
			t.Fatal(err)
		}
		if err := f.Observe(sp.ID, Observation{BatchSize: 32, StepsDone: sp.TotalSteps, TotalSteps: sp.TotalSteps, Elapsed: 1, Throughput: 1}); err != nil {
			t.Fatal(err)
		}
		f.Complete(sp.ID)
	}
}

// TestFamilies_AreBoundedWhateverJobsDeclare: 20 completed 640-epoch
// jobs of one model teach its families, then 60 jobs of models of their
// own at the epoch limit flood them. The nodes hold no more than
// maxFamilyRows epoch rows together (counted exactly),
// the saved state stays within what those rows take, and the model with
// history keeps it: the largest nodes forget first. A restored forecaster
// counts the same rows and, flooded further, saves the same state as the
// original.
func TestFamilies_AreBoundedWhateverJobsDeclare(t *testing.T) {
	f := NewForecaster(ForecastConfig{})
	for k := range 20 {
		sp := JobSpec{ID: fmt.Sprint("history-", k), Model: "ResNet-18", Mode: "gns", Workers: 1,
			InitialBatchSize: 32, DatasetSize: 50000, TotalSteps: 1_000_000}
		if err := f.Admit(sp); err != nil {
			t.Fatal(err)
		}
		if err := f.Observe(sp.ID, Observation{BatchSize: 32, StepsDone: sp.TotalSteps, TotalSteps: sp.TotalSteps, Elapsed: 60, Throughput: 100}); err != nil {
			t.Fatal(err)
		}
		f.Complete(sp.ID)
	}
	history := map[famKey][]byte{}
	for k, n := range f.nodes {
		var e wire.Encoder
		n.append(&e)
		history[k] = e.Bytes()
	}
	floodFamilies(t, f, 0, 60)
	check := func(f *Forecaster) {
		t.Helper()
		rows := 0
		for _, n := range f.nodes {
			rows += len(n.occ)
		}
		if rows != f.rows || rows > maxFamilyRows {
			t.Fatalf("the nodes hold %d rows, counted %d, bound %d", rows, f.rows, maxFamilyRows)
		}
		if rows < maxFamilyRows-3*MaxJobEpochs {
			t.Fatalf("the nodes hold %d rows: the flood should have filled them to the bound %d", rows, maxFamilyRows)
		}
	}
	check(f)
	for k, want := range history {
		var e wire.Encoder
		f.nodes[k].append(&e)
		if !bytes.Equal(e.Bytes(), want) {
			t.Fatalf("the flood changed the history's node %v", k)
		}
	}
	saved := f.MarshalState()
	if limit := 80*maxFamilyRows + 1<<20; len(saved) > limit {
		t.Fatalf("the saved state takes %d bytes, more than %d", len(saved), limit)
	}
	g := NewForecaster(ForecastConfig{})
	if err := g.UnmarshalState(saved); err != nil {
		t.Fatal(err)
	}
	check(g)
	floodFamilies(t, f, 60, 20)
	floodFamilies(t, g, 60, 20)
	check(g)
	if !bytes.Equal(f.MarshalState(), g.MarshalState()) {
		t.Fatal("the restored forecaster, flooded the same, saves another state")
	}
	t.Logf("%d nodes, %d rows, state %d bytes", len(f.nodes), f.rows, len(saved))
}
