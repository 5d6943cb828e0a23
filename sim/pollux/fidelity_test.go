package pollux

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
)

type published struct {
	Avg  map[string]map[string]map[string]float64
	JCTs map[string]map[string]map[string]map[string]float64
}

func loadPublished(t testing.TB) (dir string, pub published) {
	t.Helper()
	dir = filepath.Join(shareddata.Dir(t), "pollux")
	raw, err := os.ReadFile(filepath.Join(dir, "published-avg-jct.json"))
	if err != nil {
		t.Skipf("Pollux reference data not found (%v): place shared/data/pollux beside the checkout", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	pub.Avg = map[string]map[string]map[string]float64{}
	for _, p := range []string{"pollux", "optimus", "tiresias"} {
		var v map[string]map[string]float64
		if err := json.Unmarshal(m[p], &v); err != nil {
			t.Fatal(err)
		}
		pub.Avg[p] = v
	}
	if err := json.Unmarshal(m["jcts"], &pub.JCTs); err != nil {
		t.Fatal(err)
	}
	return dir, pub
}

func loadWorkload(t testing.TB, dir string, k int, apps Apps) []WorkloadRow {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "workloads", "workload-"+itoa(k)+".csv"))
	if err != nil {
		t.Skipf("Pollux workload %d not found: %v", k, err)
	}
	defer f.Close()
	rows, err := ParseWorkload(f, apps)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func itoa(k int) string { return string(rune('0' + k)) }
