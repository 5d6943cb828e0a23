package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

// column returns the trimmed cells under heading of the table whose header
// starts with "JOB <second>", one per row until a blank line. Offsets are
// in runes, as tabwriter aligns them; a cell that does not start where its
// heading does is an error.
func column(t *testing.T, out, second, heading string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "JOB" || f[1] != second {
			continue
		}
		hdr := []rune(l)
		at := strings.Index(l, heading)
		if at < 0 {
			t.Fatalf("header %q has no %q", l, heading)
		}
		at = len([]rune(l[:at]))
		end := len(hdr)
		for k := at + len([]rune(heading)); k+1 < len(hdr); k++ {
			if hdr[k] == ' ' && hdr[k+1] != ' ' {
				end = k + 1
				break
			}
		}
		var cells []string
		for _, row := range lines[i+1:] {
			if strings.TrimSpace(row) == "" {
				break
			}
			r := []rune(row)
			if at > len(r) {
				t.Fatalf("row %q ends before column %q", row, heading)
			}
			if at > 0 && r[at-1] != ' ' {
				t.Errorf("row %q: column %q does not start at rune %d", row, heading, at)
			}
			cells = append(cells, strings.TrimSpace(string(r[at:min(end, len(r))])))
		}
		return cells
	}
	t.Fatalf("no table with header JOB %s in:\n%s", second, out)
	return nil
}

func statusFixture() *protocol.StatusReply {
	now := 1.7e9
	return &protocol.StatusReply{V: protocol.Version, Policy: "shockwave", GPUs: 4, RoundSeconds: 120, Round: 7, Now: now,
		LogSeq: 99,
		Jobs: []protocol.JobInfo{
			{Job: "resnet-a", State: "active", Model: "ResNet-18", Workers: 2, BatchSize: 64, StepsDone: 500,
				TotalSteps: 1000, Epoch: 3, Throughput: 12.5, RunTime: 3723, LastRun: 6, GPUs: []int{0, 1}},
			{Job: "bert-b", State: "pending", Model: "BERT", Workers: 1, BatchSize: 32, TotalSteps: 800, LastRun: -1},
		},
		Plan: &protocol.PlanInfo{Round: 6, Run: []string{"resnet-a"}, Solved: true, Explain: []protocol.PlanEntry{
			{Job: "resnet-a", Run: true, Share: 0.5, PlannedRounds: 4, ForecastRemaining: 5400, ForecastP10: 3600,
				ForecastP90: 7200, ForecastPrior: "model", Regime: 64, ChangeProb: 0.1, FairShareFinish: now + 3723,
				ProjectedRho: 1.2},
			{Job: "bert-b", Share: 0.5, PlannedRounds: 2, ForecastRemaining: 600, FairShareFinish: now - 300,
				ProjectedRho: 0.9, Reason: "its 2 planned rounds come later in the window"},
		}},
	}
}

func TestStatusTable_FairFinishIsShownRelativeToTheCoordinatorsClock(t *testing.T) {
	var buf bytes.Buffer
	if err := printStatus(&buf, statusFixture()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	got := column(t, out, "RUN", "FAIR FINISH")
	if len(got) != 2 || got[0] != "in 1h2m3s" || got[1] != "5m0s ago" {
		t.Errorf("FAIR FINISH cells %q, want [in 1h2m3s 5m0s ago]\n%s", got, out)
	}
	if strings.Contains(out, "472222h") { // 1.7e9 s formatted as a duration
		t.Errorf("an absolute time printed as a duration:\n%s", out)
	}
}

func TestStatusTable_ColumnsAlignAndDurationsAreReadable(t *testing.T) {
	var buf bytes.Buffer
	if err := printStatus(&buf, statusFixture()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	checks := []struct {
		table, heading string
		want           []string
	}{
		{"STATE", "STATE", []string{"active", "pending"}},
		{"STATE", "STEPS", []string{"500/1000", "0/800"}},
		{"STATE", "RUN TIME", []string{"1h2m3s", "0s"}},
		{"STATE", "LAST RUN", []string{"6", "-"}},
		{"STATE", "GPUS", []string{"0 1", "-"}},
		{"RUN", "FORECAST", []string{"1h30m0s", "10m0s"}},
		{"RUN", "RUN", []string{"true", "false"}},
		{"RUN", "SHARE", []string{"0.50", "0.50"}},
	}
	for _, c := range checks {
		got := column(t, out, c.table, c.heading)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s: cells %q, want %q\n%s", c.heading, got, c.want, out)
		}
	}
	if !strings.Contains(out, "1h0m0s–2h0m0s") {
		t.Errorf("forecast band missing:\n%s", out)
	}
	if !strings.Contains(out, "plan of round 6 (re-solved): run resnet-a") {
		t.Errorf("plan line missing:\n%s", out)
	}
}

func TestStatusTable_NoPlanYetSaysSo(t *testing.T) {
	r := statusFixture()
	r.Plan = nil
	var buf bytes.Buffer
	if err := printStatus(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(buf.String(), "\nno round scheduled yet\n") {
		t.Errorf("output:\n%s", buf.String())
	}
}

func TestStatusTable_RelayingNodesAndRelayedOrHeldLeasesAreShown(t *testing.T) {
	r := statusFixture()
	r.Nodes = []protocol.NodeInfo{{Name: "n0", GPUs: 2, Used: 2, Relay: true}, {Name: "n1", GPUs: 2}}
	r.Jobs[0].Devices = []protocol.NodeDevices{{Node: "n0", Devices: []int{0, 1}}}
	r.Jobs[0].Leases = "relayed"
	r.Jobs[1].Leases = "held"
	var buf bytes.Buffer
	if err := printStatus(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "n0 · 2 GPUs · agent relays leases · 2 in use") || strings.Contains(out, "n1 · 2 GPUs · agent relays") {
		t.Errorf("node headings should say which agent relays:\n%s", out)
	}
	if got := column(t, out, "STATE", "STATE"); strings.Join(got, "|") != "active (leases relayed)" {
		t.Errorf("STATE cells of n0 %q\n%s", got, out)
	}
	if !strings.Contains(out, "bert-b  pending (leases held)  BERT") {
		t.Errorf("bert-b's state should say its leases are held:\n%s", out)
	}
}

// TestStatusTable_AWaitingForecastSaysSo: a forecast older than its job's
// latest report (over the forecast budget) is marked beside its prior with
// the run time it is read less of; a fresh one is not.
func TestStatusTable_AWaitingForecastSaysSo(t *testing.T) {
	r := statusFixture()
	r.Plan.Explain[0].ForecastWaiting, r.Plan.Explain[0].ForecastRunSince = true, 600
	var buf bytes.Buffer
	if err := printStatus(&buf, r); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "waiting (ran 10m0s since)"); n != 1 {
		t.Errorf("the waiting forecast is marked %d times, want once:\n%s", n, buf.String())
	}
}
