package workload

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
	"github.com/shockwave-sched/shockwave/sim/workload/internal/thrtable"
)

// TestBuiltin_EqualsTheOriginalJSONExactly checks every isolated v100 entry
// of both built-in tables, bit for bit, against the original files, decoded
// here independently of the package's reader; the package's reader must
// agree too.
func TestBuiltin_EqualsTheOriginalJSONExactly(t *testing.T) {
	keyRE := regexp.MustCompile(`^\('([^']+)', (\d+)\)$`)
	for _, name := range BuiltinNames() {
		path := shareddata.File(t, name+"_throughputs.json")
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]map[string]map[string]json.RawMessage
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		built, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := LoadThroughputs(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(doc["v100"]); built.Len() != n || loaded.Len() != n || n != 83 {
			t.Fatalf("%s: %d built-in entries, %d loaded, %d in the JSON (want 83)", name, built.Len(), loaded.Len(), n)
		}
		for key, vals := range doc["v100"] {
			m := keyRE.FindStringSubmatch(key)
			if m == nil {
				t.Fatalf("%s: unexpected key %q", name, key)
			}
			sf, _ := strconv.Atoi(m[2])
			want, err := strconv.ParseFloat(string(vals["null"]), 64)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, key, err)
			}
			for _, tbl := range []*Throughputs{built, loaded} {
				v, ok := tbl.Lookup(m[1], sf)
				if !ok || math.Float64bits(v) != math.Float64bits(want) {
					t.Errorf("%s (%s): %q on %d GPUs: got %v (present %v), JSON %v", name, tbl.Name(), m[1], sf, v, ok, want)
				}
			}
		}
	}
}

// TestBuiltin_GeneratedTableIsUpToDate regenerates throughputs_table.go in
// memory from the reference files and compares it with the checked-in one.
func TestBuiltin_GeneratedTableIsUpToDate(t *testing.T) {
	dir := shareddata.Dir(t)
	want, err := thrtable.Generate(dir, "workload")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("throughputs_table.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("throughputs_table.go is stale: run go generate ./sim/workload")
	}
}

func TestBuiltin_MatchesTheRoundedFiguresOfTheSpec(t *testing.T) {
	cases := []struct {
		set, jobType string
		sf           int
		want         float64
	}{
		{"tacc", "ResNet-18 (batch size 16)", 1, 57.6834},
		{"wisr", "ResNet-18 (batch size 16)", 8, 329.9578},
		{"tacc", "ResNet-50 (batch size 32)", 1, 5.8993},
		{"tacc", "ResNet-50 (batch size 128)", 1, 1.5979},
		{"wisr", "LM (batch size 80)", 4, 112.4341},
		{"tacc", "Recommendation (batch size 8192)", 1, 11.6317},
		{"wisr", "Transformer (batch size 128)", 2, 4.5220},
	}
	for _, c := range cases {
		thr, err := Builtin(c.set)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := thr.Lookup(c.jobType, c.sf)
		if !ok || math.Abs(v-c.want) > 5e-5 {
			t.Errorf("%s %q sf=%d: got %v (%v), want ≈ %v", c.set, c.jobType, c.sf, v, ok, c.want)
		}
	}
}

func TestLookup_ZeroEntryIsPresentMissingEntryIsNot(t *testing.T) {
	thr, err := Builtin("tacc")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := thr.Lookup("Transformer (batch size 256)", 1); !ok || v != 0 {
		t.Errorf("Transformer bs256: got %v, %v; want 0, present", v, ok)
	}
	if _, ok := thr.Lookup("Recommendation (batch size 512)", 2); ok {
		t.Error("Recommendation exists only for sf=1")
	}
	if _, ok := thr.Lookup("LM (batch size 160)", 1); ok {
		t.Error("LM bs160 is not in the file")
	}
	var none *Throughputs
	if _, ok := none.Lookup("LM (batch size 5)", 1); ok {
		t.Error("nil table has entries")
	}
}

func TestBuiltin_UnknownNameIsAnError(t *testing.T) {
	if _, err := Builtin("k80"); err == nil || !strings.Contains(err.Error(), `"k80"`) {
		t.Errorf("got %v", err)
	}
}

const tinyThroughputs = `{
  "k80": {"('ResNet-18 (batch size 16)', 1)": {"null": 1.0}},
  "v100": {
    "('ResNet-18 (batch size 16)', 1)": {"null": 57.5, "('LM (batch size 5)', 1)": [1.0, 2.0]},
    "('ResNet-18 (batch size 16)', 2)": {"null": 84.25},
    "(\"LM (batch size 5)\", 1)": {"null": 0.0},
    "('LM (batch size 10)', 1)": {"('LM (batch size 5)', 1)": [1.0, 2.0]}
  }
}`

func TestReadThroughputs_KeepsOnlyIsolatedV100Figures(t *testing.T) {
	thr, err := ReadThroughputs(strings.NewReader(tinyThroughputs), "tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	if thr.Name() != "tiny.json" || thr.Len() != 3 {
		t.Fatalf("name %q, %d entries: %v", thr.Name(), thr.Len(), thr.Entries())
	}
	want := []Entry{
		{"LM (batch size 5)", 1, 0},
		{"ResNet-18 (batch size 16)", 1, 57.5},
		{"ResNet-18 (batch size 16)", 2, 84.25},
	}
	got := thr.Entries()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadThroughputs_NamesTheBadKey(t *testing.T) {
	cases := map[string]string{
		`[]`:                                                             "not a throughput file",
		`{"k80": {}}`:                                                    `no "v100" worker type`,
		`{"v100": {"ResNet": {"null": 1}}}`:                              `key "ResNet"`,
		`{"v100": {"('A', x)": {"null": 1}}}`:                            "scale factor",
		`{"v100": {"('A', 0)": {"null": 1}}}`:                            "scale factor",
		`{"v100": {"(A, 1)": {"null": 1}}}`:                              "quoted",
		`{"v100": {"('A', 1)": {"null": "x"}}}`:                          "not a number",
		`{"v100": {"('A', 1)": {"null": null}}}`:                         "not a number",
		`{"v100": {"('A', 1)": {"null": -1}}}`:                           "negative",
		`{"v100": {"('A', 1)": {"null": 1}, "( 'A', 1 )": {"null": 2}}}`: "twice",
	}
	for in, want := range cases {
		_, err := ReadThroughputs(strings.NewReader(in), "bad.json")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "workload: bad.json: ") {
			t.Errorf("%s: error %v, want one containing %q", in, err, want)
		}
	}
}

func TestLoadThroughputs_MissingFileIsAnError(t *testing.T) {
	_, err := LoadThroughputs(filepath.Join(t.TempDir(), "none.json"))
	if err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("got %v", err)
	}
}
