package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
)

func feed(t *testing.T, events ...event) string {
	t.Helper()
	var out bytes.Buffer
	s := newSummary(&out)
	for _, e := range events {
		s.add(e)
	}
	s.finish()
	return out.String()
}

func TestSummary_PrintsPackageLinesAndFailuresAndCountsSharedDataSkips(t *testing.T) {
	p := "example.com/p"
	out := feed(t,
		event{Action: "run", Package: p, Test: "TestA"},
		event{Action: "output", Package: p, Test: "TestA", Output: "=== RUN   TestA\n"},
		event{Action: "output", Package: p, Test: "TestA", Output: "--- PASS: TestA (0.00s)\n"},
		event{Action: "pass", Package: p, Test: "TestA"},
		event{Action: "output", Package: p, Test: "TestB", Output: "=== RUN   TestB\n"},
		event{Action: "output", Package: p, Test: "TestB", Output: "    b_test.go:9: " + shareddata.SkipPrefix + "reference data not found\n"},
		event{Action: "output", Package: p, Test: "TestB", Output: "--- SKIP: TestB (0.00s)\n"},
		event{Action: "skip", Package: p, Test: "TestB"},
		event{Action: "output", Package: p, Test: "TestC", Output: "    c_test.go:3: no chromium\n"},
		event{Action: "skip", Package: p, Test: "TestC"},
		event{Action: "output", Package: p, Test: "TestD", Output: "=== RUN   TestD\n"},
		event{Action: "output", Package: p, Test: "TestD", Output: "    d_test.go:5: want 2, got 3\n"},
		event{Action: "output", Package: p, Test: "TestD", Output: "--- FAIL: TestD (0.01s)\n"},
		event{Action: "fail", Package: p, Test: "TestD"},
		event{Action: "output", Package: p, Output: "FAIL\n"},
		event{Action: "output", Package: p, Output: "FAIL\texample.com/p\t0.02s\n"},
		event{Action: "output", Package: "example.com/q", Output: "PASS\n"},
		event{Action: "output", Package: "example.com/q", Output: "ok  \texample.com/q\t(cached)\n"},
	)
	want := "    d_test.go:5: want 2, got 3\n--- FAIL: TestD (0.01s)\nFAIL\nFAIL\texample.com/p\t0.02s\n" +
		"ok  \texample.com/q\t(cached)\n" +
		"1 test skipped for lack of ../shared data (set $SHOCKWAVE_SHARED_DATA or place shared/ beside the checkout)\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestSummary_CountsARealSkipFromGoTestJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command(goBin, "test", "-json", "-count=1", "-run", "TestDir_Skips", "../shareddata")
	cmd.Env = append(os.Environ(), shareddata.EnvVar+"="+filepath.Join(t.TempDir(), "missing"))
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("go test: %v", err)
	}
	var out bytes.Buffer
	s := newSummary(&out)
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		s.add(e)
	}
	s.finish()
	if s.skipped != 1 || !strings.Contains(out.String(), "1 test skipped for lack of ../shared data") {
		t.Errorf("counted %d skips; output:\n%s", s.skipped, out.String())
	}
	if !strings.HasPrefix(out.String(), "ok  \tgithub.com/shockwave-sched/shockwave/internal/shareddata") {
		t.Errorf("package line missing:\n%s", out.String())
	}
}
