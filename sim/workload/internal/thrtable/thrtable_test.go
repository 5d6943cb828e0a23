package thrtable

import (
	"strings"
	"testing"
)

func TestParseKey_AcceptsPythonTupleStrings(t *testing.T) {
	cases := []struct {
		key, jt string
		sf      int
	}{
		{"('ResNet-18 (batch size 64)', 2)", "ResNet-18 (batch size 64)", 2},
		{`("LM (batch size 5)", 1)`, "LM (batch size 5)", 1},
		{"( 'A3C' , 8 )", "A3C", 8},
	}
	for _, c := range cases {
		jt, sf, err := ParseKey(c.key)
		if err != nil || jt != c.jt || sf != c.sf {
			t.Errorf("ParseKey(%q) = %q, %d, %v", c.key, jt, sf, err)
		}
	}
	for _, bad := range []string{"", "()", "('A')", "('A', -1)", "('A', 1.0)", "('A\", 1)", "(A, 1)", "('', 1)", `('it\'s', 1)`} {
		if _, _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q): no error", bad)
		}
	}
}

func TestRender_KeepsFullPrecisionAndNamesTheSource(t *testing.T) {
	tenth := 0.1
	src, err := Render("workload", []Set{{Name: "x", Source: "x.json", Entries: []Entry{
		{"LM (batch size 5)", 1, 133.83795910000001},
		{"LM (batch size 5)", 2, tenth + 0.2},
		{"Transformer (batch size 256)", 1, 0},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	for _, want := range []string{
		"// Code generated", "uw-mad-dash/shockwave at commit 8a44f4a", "MIT License",
		"package workload", "// x.json", `"x": {`,
		`{"LM (batch size 5)", 1, 133.8379591}`, `{"LM (batch size 5)", 2, 0.30000000000000004}`,
		`{"Transformer (batch size 256)", 1, 0}`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("rendered source lacks %q:\n%s", want, s)
		}
	}
}

func TestParse_SortsByModelThenNumericBatchSize(t *testing.T) {
	in := `{"v100": {
		"('LM (batch size 10)', 1)": {"null": 1},
		"('LM (batch size 5)', 2)": {"null": 2},
		"('LM (batch size 5)', 1)": {"null": 3},
		"('A3C', 1)": {"null": 0}}}`
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A3C/1", "LM (batch size 5)/1", "LM (batch size 5)/2", "LM (batch size 10)/1"}
	for i, e := range got {
		if k := e.JobType + "/" + string(rune('0'+e.ScaleFactor)); k != want[i] {
			t.Errorf("entry %d: %s, want %s", i, k, want[i])
		}
	}
}
