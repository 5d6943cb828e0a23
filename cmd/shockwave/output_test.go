package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// oneJSONDocument fails unless out is exactly one JSON value (surrounding
// white space aside).
func oneJSONDocument(t *testing.T, what, out string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: stdout is not JSON: %v\n%s", what, err, out)
	}
	if _, ok := v.(map[string]any); !ok {
		t.Errorf("%s: stdout is a %T, want a JSON object", what, v)
	}
	if err := dec.Decode(&v); !errors.Is(err, io.EOF) {
		rest, _ := io.ReadAll(dec.Buffered())
		t.Errorf("%s: more than one JSON document on stdout (%v); after the first: %q", what, err, rest)
	}
}

var formatFlag = regexp.MustCompile(`(?m)^\s+-format\b`)

// formatCommands lists the commands whose flags include --format.
func formatCommands(t *testing.T) []string {
	t.Helper()
	var out []string
	for name := range commands {
		var o, e bytes.Buffer
		commands[name].run([]string{"-h"}, &o, &e)
		if formatFlag.MatchString(e.String()) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// jsonCases run every command that has --format json; the test below
// checks that the list is complete.
var jsonCases = map[string]func(t *testing.T) []string{
	"simulate": func(t *testing.T) []string {
		return []string{"simulate", "--generate", "20", "--gpus", "8", "--policy", "shockwave,gavel",
			"--forecast-report", filepath.Join(t.TempDir(), "f.json"), "--plot", t.TempDir(), "--format", "json"}
	},
	"solve": func(t *testing.T) []string {
		dir := t.TempDir()
		if code, _, e := runCLI("simulate", "--generate", "20", "--gpus", "8", "--policy", "shockwave", "--dump-instances", dir); code != 0 {
			t.Fatalf("simulate: %s", e)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "round-*.json"))
		if len(files) == 0 {
			t.Fatal("no instances dumped")
		}
		return []string{"solve", "--instance", files[0], "--format", "json"}
	},
	"status": func(t *testing.T) []string {
		url := startCoordinator(t, "--gpus", "2", "--data-dir", t.TempDir(), "--policy", "gavel", "--log-level", "warn")
		statusEventually(t, "--nats-url", url)
		return []string{"status", "--nats-url", url, "--format", "json"}
	},
}

func TestFormatJSON_StdoutIsExactlyOneJSONDocumentForEveryCommandWithTheFlag(t *testing.T) {
	have := formatCommands(t)
	var want []string
	for name := range jsonCases {
		want = append(want, name)
	}
	sort.Strings(want)
	if !slices.Equal(have, want) {
		t.Fatalf("commands with --format: %v; this test covers %v", have, want)
	}
	for _, name := range want {
		t.Run(name, func(t *testing.T) {
			args := jsonCases[name](t)
			code, out, errOut := runCLI(args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			oneJSONDocument(t, strings.Join(args, " "), out)
		})
	}
}

func TestSimulate_ForecastSummaryGoesToStderrWithFormatJSONAndToStdoutAsATable(t *testing.T) {
	report := filepath.Join(t.TempDir(), "f.json")
	args := []string{"simulate", "--generate", "20", "--gpus", "8", "--policy", "shockwave", "--forecast-report", report}
	_, out, errOut := runCLI(append(args, "--format", "json")...)
	if !strings.Contains(errOut, "remaining-time forecasts") || strings.Contains(out, "remaining-time forecasts") {
		t.Errorf("json: the forecast summary must be on stderr only\nstdout %q\nstderr %q", out, errOut)
	}
	_, out, _ = runCLI(args...)
	if !strings.Contains(out, "remaining-time forecasts") {
		t.Errorf("table: the forecast summary is missing from stdout:\n%s", out)
	}
}

func TestCoordinatorLog_ConsoleColoursOnlyOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "console", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Float64("solve_s", 0.5).Msg("round")
	if strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("colour codes written to a buffer: %q", buf.String())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log, _ = newLogger(f, "console", "info")
	log.Info().Msg("to a file")
	data, _ := os.ReadFile(f.Name())
	if strings.Contains(string(data), "\x1b[") || !strings.Contains(string(data), "to a file") {
		t.Errorf("log file %q", data)
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !isTerminal(tty) {
			t.Error("/dev/tty is not seen as a terminal")
		}
	}
}

func TestCoordinatorLog_DurationFieldsNameTheirUnit(t *testing.T) {
	var buf syncBuffer
	url := startCoordinatorLogging(t, &buf, "--gpus", "2", "--data-dir", t.TempDir())
	statusEventually(t, "--nats-url", url)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(buf.String(), `"message":"round"`) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var seen []string
	for _, line := range strings.Split(buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec[zerolog.MessageFieldName] {
		case "round":
			seen = append(seen, "round")
			for _, k := range []string{"solve_s", "tick_to_last_lease_s"} {
				if v, ok := rec[k].(float64); !ok || v < 0 || v > 60 {
					t.Errorf("round record %s = %v, want seconds", k, rec[k])
				}
			}
		case "log replayed; serving":
			seen = append(seen, "replayed")
			if _, ok := rec["took_s"].(float64); !ok {
				t.Errorf("replay record lacks took_s: %v", rec)
			}
		}
		for _, bare := range []string{"solve", "took", "tick_to_last_lease"} {
			if _, ok := rec[bare]; ok {
				t.Errorf("field %q has no unit: %s", bare, line)
			}
		}
	}
	if !slices.Contains(seen, "round") || !slices.Contains(seen, "replayed") {
		t.Errorf("log lacks the round and replay records:\n%s", buf.String())
	}
}
