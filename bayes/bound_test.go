package bayes

import (
	"bytes"
	"fmt"
	"math"
	"testing"
)

// teachHistoryJobs completes n honest ResNet-18 jobs that measured
// throughput at batch sizes 32 and 64: the peer entries, family nodes,
// batch record and ratio posterior of a model with history.
func teachHistoryJobs(t *testing.T, f *Forecaster, n int) {
	t.Helper()
	for k := range n {
		sp := JobSpec{ID: fmt.Sprint("history-", k), Model: "ResNet-18", Mode: "gns", Workers: 1,
			InitialBatchSize: 32, DatasetSize: 3200, TotalSteps: 1000}
		observeAll(t, f, sp.ID, sp, []Observation{
			{BatchSize: 32, StepsDone: 300, TotalSteps: 1000, Elapsed: 3, Throughput: 100},
			{BatchSize: 64, StepsDone: 1000, TotalSteps: 1000, Elapsed: 3, Throughput: 60},
		})
		f.Complete(sp.ID)
	}
}

// observeAll admits sp and folds obs.
func observeAll(t *testing.T, f *Forecaster, id string, sp JobSpec, obs []Observation) {
	t.Helper()
	if err := f.Admit(sp); err != nil {
		t.Fatal(err)
	}
	for _, o := range obs {
		if err := f.Observe(id, o); err != nil {
			t.Fatal(err)
		}
	}
}

// floodBatchSizes makes the live job h report n batch sizes it never used
// before, from bs on, each with a throughput: as many peer entries as
// reports, as a job at its event budget could.
func floodBatchSizes(t *testing.T, f *Forecaster, h string, bs, n int) {
	t.Helper()
	for k := range n {
		if err := f.Observe(h, Observation{BatchSize: bs + k, StepsDone: int64(bs + k), TotalSteps: 1e10, Elapsed: 0.01, Throughput: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// floodModels completes n jobs of models of their own, from model index
// from, each measuring two batch sizes (a batch record, a ratio posterior
// and three family nodes a model).
func floodModels(t *testing.T, f *Forecaster, from, n int) {
	t.Helper()
	for k := from; k < from+n; k++ {
		sp := JobSpec{ID: fmt.Sprint("m-job-", k), Model: fmt.Sprint("m-", k), Mode: "gns", Workers: 1 + k%3,
			InitialBatchSize: 16, DatasetSize: 160, TotalSteps: 100}
		observeAll(t, f, sp.ID, sp, []Observation{
			{BatchSize: 16, StepsDone: 20, TotalSteps: 100, Elapsed: 1, Throughput: 5},
			{BatchSize: 32, StepsDone: 100, TotalSteps: 100, Elapsed: 1, Throughput: 3},
		})
		f.Complete(sp.ID)
	}
}

// checkBounds fails when a table holds more than its bound beyond what
// the live jobs use, or the row count drifted from the nodes'.
func checkBounds(t *testing.T, f *Forecaster) {
	t.Helper()
	live := len(f.jobs)
	rows := 0
	for _, n := range f.nodes {
		rows += len(n.occ)
	}
	switch {
	case len(f.thr) > maxPeerEntries+live:
		t.Fatalf("%d peer entries with %d live jobs, bound %d", len(f.thr), live, maxPeerEntries)
	case len(f.nodes) > maxFamilyNodes+nodesPerJob*live:
		t.Fatalf("%d family nodes with %d live jobs, bound %d", len(f.nodes), live, maxFamilyNodes)
	case len(f.batch) > maxModels+live:
		t.Fatalf("%d batch records with %d live jobs, bound %d", len(f.batch), live, maxModels)
	case len(f.ratio) > maxModels+1:
		t.Fatalf("%d ratio posteriors, bound %d", len(f.ratio), maxModels+1)
	case rows != f.rows:
		t.Fatalf("the nodes hold %d rows, counted %d", rows, f.rows)
	}
}

// TestBound_AJobReportingEveryBatchSizeCannotGrowThePeerTable: a live job
// of the victims' model reports 3× the peer table's bound in batch sizes
// of its own (each with a throughput). The table stays within its bound
// plus the live jobs' entries; the entries with history (20 jobs' worth)
// and a live victim's entry (one observation, as many as each flooded
// one) stay, with their means; a forecaster restored mid-flood evicts as
// the original does.
func TestBound_AJobReportingEveryBatchSizeCannotGrowThePeerTable(t *testing.T) {
	f := NewForecaster(ForecastConfig{})
	teachHistoryJobs(t, f, 20)
	victim := JobSpec{ID: "victim", Model: "ResNet-18", Mode: "gns", Workers: 2, InitialBatchSize: 128, DatasetSize: 12800, TotalSteps: 1000}
	observeAll(t, f, "victim", victim, []Observation{{BatchSize: 128, StepsDone: 10, TotalSteps: 1000, Elapsed: 1, Throughput: 40}})
	hostile := JobSpec{ID: "h", Model: "ResNet-18", Mode: "gns", Workers: 1, InitialBatchSize: 1000, DatasetSize: 1e12, TotalSteps: 1e10}
	observeAll(t, f, "h", hostile, nil)
	want := map[thrKey]thrStat{}
	for _, k := range []thrKey{{"ResNet-18", 32, 1}, {"ResNet-18", 64, 1}, {"ResNet-18", 128, 2}} {
		s := f.thr[k]
		if s == nil || s.n == 0 {
			t.Fatalf("no peer entry %v before the flood", k)
		}
		want[k] = *s
	}
	floodBatchSizes(t, f, "h", 1000, 2*maxPeerEntries)
	checkBounds(t, f)
	g := NewForecaster(ForecastConfig{})
	if err := g.UnmarshalState(f.MarshalState()); err != nil {
		t.Fatal(err)
	}
	floodBatchSizes(t, f, "h", 1000+2*maxPeerEntries, maxPeerEntries)
	floodBatchSizes(t, g, "h", 1000+2*maxPeerEntries, maxPeerEntries)
	checkBounds(t, f)
	if len(f.thr) < boundTarget(maxPeerEntries) {
		t.Fatalf("%d peer entries: the flood should have filled the table to its bound", len(f.thr))
	}
	for k, w := range want {
		if s := f.thr[k]; s == nil || *s != w {
			t.Fatalf("the flood evicted or changed the peer entry %v: %v, want %v", k, s, w)
		}
	}
	if !bytes.Equal(f.MarshalState(), g.MarshalState()) {
		t.Fatal("the restored forecaster, flooded the same, saves another state")
	}
	if _, err := f.Forecast("victim"); err != nil {
		t.Fatalf("no forecast for the victim after the flood: %v", err)
	}
}

// TestBound_JobsOfModelsOfTheirOwnCannotGrowTheModelTables: 6,000
// completed jobs each name a model, mode width and recipe of their own
// (more models than maxModels, more nodes than maxFamilyNodes). The batch
// records, ratio posteriors and family nodes stay within their bounds; the
// model with history keeps them all; a live job's nodes stay however few
// jobs taught them; a restored forecaster evicts as the original does.
func TestBound_JobsOfModelsOfTheirOwnCannotGrowTheModelTables(t *testing.T) {
	f := NewForecaster(ForecastConfig{})
	teachHistoryJobs(t, f, 20)
	live := JobSpec{ID: "live", Model: "rare-model", Mode: "static", Workers: 1, InitialBatchSize: 8, DatasetSize: 800, TotalSteps: 1000}
	observeAll(t, f, "live", live, []Observation{{BatchSize: 8, StepsDone: 10, TotalSteps: 1000, Elapsed: 1, Throughput: 7}})
	ratio := *f.ratio["ResNet-18"]
	batch := *f.batch["ResNet-18"]
	var kept []famKey
	for lvl := range nodesPerJob {
		kept = append(kept, familyKey(lvl, JobSpec{Model: "ResNet-18", Mode: "gns", Workers: 1, InitialBatchSize: 32}),
			familyKey(lvl, live))
	}
	floodModels(t, f, 0, 4000)
	checkBounds(t, f)
	g := NewForecaster(ForecastConfig{})
	if err := g.UnmarshalState(f.MarshalState()); err != nil {
		t.Fatal(err)
	}
	floodModels(t, f, 4000, 2000)
	floodModels(t, g, 4000, 2000)
	checkBounds(t, f)
	checkBounds(t, g)
	if len(f.batch) < boundTarget(maxModels) || len(f.nodes) < boundTarget(maxFamilyNodes) {
		t.Fatalf("%d batch records and %d nodes: the flood should have filled them to their bounds", len(f.batch), len(f.nodes))
	}
	if r := f.ratio["ResNet-18"]; r == nil || *r != ratio {
		t.Fatalf("the flood evicted or changed the history's ratio posterior: %v, want %v", r, ratio)
	}
	if b := f.batch["ResNet-18"]; b == nil || *b != batch {
		t.Fatalf("the flood evicted or changed the history's batch record: %v, want %v", b, batch)
	}
	for _, k := range kept {
		if f.nodes[k] == nil {
			t.Fatalf("the flood evicted the node %v", k)
		}
	}
	if f.ratio[""] == nil {
		t.Fatal("the flood evicted the pooled ratio posterior")
	}
	if !bytes.Equal(f.MarshalState(), g.MarshalState()) {
		t.Fatal("the restored forecaster, flooded the same, saves another state")
	}
	fc, err := f.Forecast("live")
	if err != nil || math.IsNaN(fc.Remaining.Mean) {
		t.Fatalf("no forecast for the live job after the flood: %v %v", fc, err)
	}
	t.Logf("%d peer entries, %d nodes, %d batch records, %d ratio posteriors, state %d bytes",
		len(f.thr), len(f.nodes), len(f.batch), len(f.ratio), len(f.MarshalState()))
}
