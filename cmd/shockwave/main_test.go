package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodLine = "ResNet-18 (batch size 32)\tpython3 main.py --batch_size 32\tcifar10\t--num_steps\t1\t5000\t1\tgns\t1\t-1.000000\t120\t0\n"

// TestSimulate_BadInputIsOneLineAndExitCode2 checks that each kind of bad
// input yields exit status 2 and a single line naming what was wrong.
func TestSimulate_BadInputIsOneLineAndExitCode2(t *testing.T) {
	badSteps := writeFile(t, "bad.trace", goodLine+strings.Replace(goodLine, "\t5000\t", "\tabc\t", 1))
	badModel := writeFile(t, "model.trace", strings.Replace(goodLine, "ResNet-18", "GPT-9", 1))
	noThr := writeFile(t, "nothr.trace", strings.Replace(goodLine, "\t1\tgns", "\t3\tgns", 1))
	badJSON := writeFile(t, "thr.json", "{not json")
	cases := []struct {
		name string
		args []string
		want []string // substrings of the one error line
	}{
		{"malformed field", []string{"--trace", badSteps}, []string{"bad.trace:2", "total_steps"}},
		{"unknown job type", []string{"--trace", badModel}, []string{"model.trace:1", "GPT-9"}},
		{"missing throughput", []string{"--trace", noThr}, []string{"line 1", "3 GPUs"}},
		{"bad throughput file", []string{"--throughputs", badJSON}, []string{"thr.json"}},
		{"non-positive GPUs", []string{"--gpus", "0"}, []string{"--gpus", "0"}},
		{"unknown policy", []string{"--policy", "fifo9"}, []string{"unknown policy", "fifo9"}},
		{"missing trace file", []string{"--trace", "/nonexistent/x.trace"}, []string{"x.trace"}},
		{"bad format", []string{"--format", "xml"}, []string{"xml"}},
		{"bad config", []string{"--config", badJSON}, []string{"--config"}},
		{"gpus and nodes", []string{"--gpus", "8", "--nodes", "2x4"}, []string{"--gpus", "--nodes"}},
		{"bad nodes", []string{"--nodes", "4"}, []string{"--nodes", "NxK"}},
		{"bad cluster", []string{"--cluster", badJSON}, []string{"--cluster"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCLI(append([]string{"simulate"}, c.args...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr %q", code, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty: %q", out)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if len(lines) != 1 {
				t.Fatalf("want one error line, got %q", errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("error %q does not mention %q", lines[0], w)
				}
			}
		})
	}
}

// TestSimulate_JSONHasTheContractShape runs a small generated trace and
// checks the documented JSON fields.
func TestSimulate_JSONHasTheContractShape(t *testing.T) {
	code, out, errOut := runCLI("simulate", "--generate", "20", "--seed", "3", "--gpus", "8", "--policy", "gavel,max_min_fairness,gandiva_fair", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 2 { // the alias resolves to gavel, which runs once
		t.Fatalf("got %d results, want 2", len(doc.Results))
	}
	for _, k := range []string{"policy", "makespan_s", "avg_jct_s", "worst_ftf", "unfair_pct_105", "unfair_pct_110", "utilization", "rounds", "jct_s", "ftf"} {
		if _, ok := doc.Results[0][k]; !ok {
			t.Errorf("missing field %q", k)
		}
	}
}

// TestSimulate_NodesFlagPlacesOnNodes: --nodes and --cluster run on that
// cluster and the JSON names it; one node of N (--nodes 1xN) gives exactly
// the flat pool's results.
func TestSimulate_NodesFlagPlacesOnNodes(t *testing.T) {
	args := []string{"simulate", "--generate", "30", "--seed", "5", "--policy", "gavel", "--format", "json"}
	code, flat, errOut := runCLI(append(args, "--gpus", "8")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, one, errOut := runCLI(append(args, "--nodes", "1x8")...)
	if code != 0 || one != flat {
		t.Fatalf("--nodes 1x8 (exit %d, %s) differs from --gpus 8:\n%s\n%s", code, errOut, one, flat)
	}
	code, four, errOut := runCLI(append(args, "--nodes", "4x2")...)
	if code != 0 || !strings.Contains(four, `"nodes":"4x2"`) || !strings.Contains(four, `"gpus":8`) {
		t.Fatalf("--nodes 4x2: exit %d, %s\n%s", code, errOut, four)
	}
	file := writeFile(t, "cluster.json", `{"nodes":[{"name":"a","gpus":8,"type":"v100"},{"name":"b","gpus":4}]}`)
	code, mixed, errOut := runCLI(append(args, "--cluster", file)...)
	if code != 0 || !strings.Contains(mixed, `"nodes":"a:8:v100,b:4"`) || !strings.Contains(mixed, `"gpus":12`) {
		t.Fatalf("--cluster: exit %d, %s\n%s", code, errOut, mixed)
	}
}

// TestSolve_ExplainsADumpedInstance round-trips an instance through
// simulate --dump-instances and solve.
func TestSolve_ExplainsADumpedInstance(t *testing.T) {
	dir := t.TempDir()
	if code, _, e := runCLI("simulate", "--generate", "30", "--gpus", "8", "--policy", "shockwave", "--dump-instances", dir); code != 0 {
		t.Fatalf("simulate: %s", e)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "round-*.json"))
	if len(files) == 0 {
		t.Fatal("no instances dumped")
	}
	code, out, e := runCLI("solve", "--instance", files[len(files)/2])
	if code != 0 {
		t.Fatalf("solve: %s", e)
	}
	if !strings.Contains(out, "price of a GPU-round") || !strings.Contains(out, "planned") {
		t.Errorf("unexpected output:\n%s", out)
	}
	if code, _, e := runCLI("solve", "--instance", writeFile(t, "bad.json", `{"v":1,"gpus":0}`)); code != 2 || !strings.Contains(e, "GPUs") {
		t.Errorf("bad instance: exit %d, %q", code, e)
	}
}
