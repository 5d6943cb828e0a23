package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const polluxWorkload = "name,time,application,num_replicas,batch_size\n" +
	"cifar10-0,0,cifar10,2,256\nncf-1,0,ncf,1,256\nbert-2,30,bert,1,12\ncifar10-3,90,cifar10,1,128\n"

// A Pollux workload is recognised by its header and compared on the
// default 16x4 cluster with the published averages beside ours.
func TestSimulatePollux_DetectsTheFormatAndPrintsTheTable(t *testing.T) {
	trace := writeFile(t, "workload-1.csv", polluxWorkload)
	pub := writeFile(t, "published.json", `{"tiresias": {"1.0": {"workload-1": 1000}}}`)
	code, out, errOut := runCLI("simulate", "--trace", trace, "--policy", "tiresias,optimus,shockwave",
		"--published", pub)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"4 jobs on 16x4 (64 GPUs)", "tiresias", "optimus", "shockwave", "shockwave+agent", "1000.0", "worst ρ"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	code, out, errOut = runCLI("simulate", "--trace", trace, "--policy", "tiresias", "--nodes", "2x4", "--format", "json")
	if code != 0 {
		t.Fatalf("json: exit %d: %s", code, errOut)
	}
	var res []struct {
		Policy string
		Jobs   int
		AvgJCT float64
		JCT    map[string]int
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 || res[0].Jobs != 4 || len(res[0].JCT) != 4 || res[0].AvgJCT <= 0 {
		t.Fatalf("json %v: %s", err, out)
	}
}

func TestSimulatePollux_BadInputIsOneLineAndExitCode2(t *testing.T) {
	trace := writeFile(t, "w.csv", polluxWorkload)
	bad := writeFile(t, "bad.csv", "name,time,application,num_replicas,batch_size\na,0,gpt,1,1\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", bad}, "field 3"},
		{[]string{"--trace", trace, "--nodes", "4x8"}, "1 to 4 GPUs"},
		{[]string{"--trace", trace, "--nodes", "x"}, "--nodes"},
		{[]string{"--trace", trace, "--nodes", "2x4", "--cluster", trace}, "give one"},
		{[]string{"--trace", trace, "--batch", "huge"}, "--batch"},
		{[]string{"--trace", trace, "--apps", "mine"}, "--apps"},
		{[]string{"--trace", trace, "--round", "90s"}, "--round"},
		{[]string{"--trace", trace, "--policy", "fifo9"}, "fifo9"},
		{[]string{"--trace", trace, "--published", "/nonexistent.json"}, "--published"},
	} {
		code, out, errOut := runCLI(append([]string{"simulate"}, c.args...)...)
		if code != 2 || out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.args, code, out, errOut, c.want)
		}
	}
}
