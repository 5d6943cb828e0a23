package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/report"
)

// contractKeys are the fields other tools rely on, in their order.
var contractKeys = []string{
	"policy", "makespan_s", "avg_jct_s", "worst_ftf", "unfair_pct_105",
	"unfair_pct_110", "utilization", "rounds", "jct_s", "ftf",
}

func writeJSON(t *testing.T, results []*sim.Result) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, results); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	return buf.Bytes()
}

// topLevelKeys returns the keys of the JSON object in raw, in the order
// they appear.
func topLevelKeys(t *testing.T, raw []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("want an object, got %v (%v)", tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestWriteJSON_ContractKeysComeFirstInOrder(t *testing.T) {
	raw := writeJSON(t, threePolicies())
	var doc struct{ Results []json.RawMessage }
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	if keys := topLevelKeys(t, raw); !slices.Equal(keys, []string{"results"}) {
		t.Fatalf("top-level keys = %v, want [results]", keys)
	}
	if len(doc.Results) != 3 {
		t.Fatalf("%d results, want 3", len(doc.Results))
	}
	for i, r := range doc.Results {
		keys := topLevelKeys(t, r)
		if len(keys) < len(contractKeys) || !slices.Equal(keys[:len(contractKeys)], contractKeys) {
			t.Errorf("result %d keys = %v, want prefix %v", i, keys, contractKeys)
		}
		for _, k := range keys {
			if strings.HasPrefix(k, "round_") || k == "schedules" {
				t.Errorf("result %d has per-round field %q", i, k)
			}
		}
	}
	// The raw bytes too: each contract key appears after the previous one.
	line := raw[bytes.Index(raw, []byte(`{"policy"`)):]
	pos := -1
	for _, k := range contractKeys {
		at := bytes.Index(line, []byte(`"`+k+`":`))
		if at <= pos {
			t.Fatalf("key %q at %d, not after the previous key (at %d)", k, at, pos)
		}
		pos = at
	}
}

func TestWriteJSON_ValuesAndListsInTraceOrder(t *testing.T) {
	in := threePolicies()
	raw := writeJSON(t, in)
	var doc struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for i, got := range doc.Results {
		want := in[i]
		if got["policy"] != want.Policy || got["makespan_s"] != want.Makespan ||
			got["avg_jct_s"] != want.AvgJCT || got["worst_ftf"] != want.WorstFTF ||
			got["unfair_pct_105"] != want.UnfairPct105 || got["unfair_pct_110"] != want.UnfairPct110 ||
			got["utilization"] != want.Utilization || got["rounds"] != float64(want.Rounds) ||
			got["gpus"] != float64(want.GPUs) || got["jobs"] != float64(want.Jobs) {
			t.Errorf("result %d: scalars %v do not match %+v", i, got, want)
		}
		for key, list := range map[string][]float64{"jct_s": want.JCT, "ftf": want.FTF} {
			arr, ok := got[key].([]any)
			if !ok || len(arr) != len(list) {
				t.Fatalf("result %d: %s = %v, want %v", i, key, got[key], list)
			}
			for k := range arr {
				if arr[k] != list[k] {
					t.Errorf("result %d: %s[%d] = %v, want %v", i, key, k, arr[k], list[k])
				}
			}
		}
	}
}

func TestWriteJSON_SameInputSameBytes(t *testing.T) {
	a, b := writeJSON(t, threePolicies()), writeJSON(t, threePolicies())
	if !bytes.Equal(a, b) {
		t.Fatalf("two calls differ:\n%s\n%s", a, b)
	}
}

func TestWriteJSON_FloatsRoundTripExactly(t *testing.T) {
	a, b := 0.1, 0.2 // variables, so that the sum is rounded like at run time
	tricky := []float64{a + b, 1e-7, 24197.42350629904, 1e22, 5e-324}
	r := &sim.Result{Policy: "x", JCT: tricky, FTF: []float64{}}
	raw := writeJSON(t, []*sim.Result{r})
	var doc struct {
		Results []struct {
			JCT []float64 `json:"jct_s"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(doc.Results[0].JCT, tricky) {
		t.Fatalf("read back %v, want %v", doc.Results[0].JCT, tricky)
	}
	if !bytes.Contains(raw, []byte("0.30000000000000004")) {
		t.Errorf("0.1+0.2 not in shortest round-trip form:\n%s", raw)
	}
}

func TestWriteJSON_NilListsPrintAsEmpty(t *testing.T) {
	raw := writeJSON(t, []*sim.Result{{Policy: "gavel"}})
	if !bytes.Contains(raw, []byte(`"jct_s":[],"ftf":[]`)) || bytes.Contains(raw, []byte("null")) {
		t.Fatalf("nil lists not printed as []:\n%s", raw)
	}
}

func TestWriteJSON_NoResultsIsAnEmptyList(t *testing.T) {
	if got := string(writeJSON(t, nil)); got != "{\"results\":[]}\n" {
		t.Fatalf("got %q", got)
	}
}

func TestWriteJSON_RejectsWhatJSONCannotCarry(t *testing.T) {
	for name, r := range map[string]*sim.Result{
		"avg_jct_s": {Policy: "empty", AvgJCT: math.NaN()},
		"ftf[1]":    {Policy: "empty", FTF: []float64{1, math.Inf(1)}},
	} {
		var buf bytes.Buffer
		err := report.WriteJSON(&buf, []*sim.Result{threePolicies()[0], r})
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), `"empty"`) {
			t.Errorf("%s: err = %v, want one naming the policy and field", name, err)
		}
		if buf.Len() != 0 {
			t.Errorf("%s: wrote %d bytes before failing", name, buf.Len())
		}
	}
	if err := report.WriteJSON(&bytes.Buffer{}, []*sim.Result{nil}); err == nil {
		t.Error("nil result: no error")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteJSON_ReportsWriteErrors(t *testing.T) {
	if err := report.WriteJSON(failingWriter{}, threePolicies()); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
}
