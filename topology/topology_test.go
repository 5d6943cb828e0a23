package topology

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseNodes_Uniform(t *testing.T) {
	c, err := ParseNodes("4x8")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != 4 || c.GPUs() != 32 || c.Nodes[3].Name != "node-3" || c.String() != "4x8" {
		t.Fatalf("got %+v (%s)", c, c)
	}
}

func TestParseNodes_RejectsBadForms(t *testing.T) {
	for _, s := range []string{"", "4", "x8", "4x", "0x8", "4x0", "-1x8", "4x8x2", "ax8", "70000x1", "1x2000"} {
		if _, err := ParseNodes(s); err == nil {
			t.Errorf("ParseNodes(%q) accepted", s)
		}
	}
}

func TestDecode_RejectsBadDescriptions(t *testing.T) {
	cases := map[string]string{
		`{"nodes":[]}`: "no nodes",
		`{"nodes":[{"name":"a","gpus":1},{"name":"a","gpus":2}]}`: "used twice",
		`{"nodes":[{"name":"a b","gpus":1}]}`:                     "name",
		`{"nodes":[{"name":"a","gpus":0}]}`:                       "GPUs",
		`{"nodes":[{"name":"a","gpus":1,"extra":1}]}`:             "unknown field",
		`{"nodes":[{"name":"a","gpus":1}]} {}`:                    "trailing",
		`{"nodes":[{"name":"a.b","gpus":1}]}`:                     "name",
	}
	for in, want := range cases {
		_, err := Decode([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%s) = %v, want an error naming %q", in, err, want)
		}
	}
}

func TestLoad_ReadsTypedNodes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte(`{"nodes":[{"name":"a","gpus":4,"type":"v100"},{"name":"b","gpus":2}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.GPUs() != 6 || c.MaxPerNode() != 4 || c.Index("b") != 1 || c.Index("z") != -1 || c.String() != "a:4:v100,b:2" {
		t.Fatalf("got %+v (%s)", c, c)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestLocate_InvertsOffsets(t *testing.T) {
	c := Cluster{Nodes: []Node{{Name: "a", GPUs: 3}, {Name: "b", GPUs: 1}, {Name: "c", GPUs: 2}}}
	off := c.Offsets()
	for id := 0; id < c.GPUs(); id++ {
		n, l, ok := c.Locate(id)
		if !ok || off[n]+l != id || l >= c.Nodes[n].GPUs {
			t.Fatalf("Locate(%d) = %d,%d,%v", id, n, l, ok)
		}
	}
	for _, id := range []int{-1, 6, 100} {
		if _, _, ok := c.Locate(id); ok {
			t.Fatalf("Locate(%d) ok", id)
		}
	}
}

func TestFlat_IsOneNode(t *testing.T) {
	c := Flat(32)
	if len(c.Nodes) != 1 || c.GPUs() != 32 || c.Validate() != nil {
		t.Fatalf("got %+v", c)
	}
}
