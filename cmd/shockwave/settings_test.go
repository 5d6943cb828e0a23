package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
)

// coordinatorConfig parses coordinator flags and validates them.
func coordinatorConfig(t *testing.T, args ...string) (coordinator.ServiceConfig, error) {
	t.Helper()
	var f coordFlags
	fs := newFlags("coordinator", &strings.Builder{})
	f.register(fs)
	if err := parseFlags(fs, append([]string{"--gpus", "2"}, args...)); err != nil {
		return coordinator.ServiceConfig{}, err
	}
	cfg, _, err := f.validate()
	return cfg, err
}

func infoOf(t *testing.T, cfg coordinator.ServiceConfig) string {
	t.Helper()
	raw, ok := cfg.PolicyOptions.Config.(json.RawMessage)
	if !ok {
		return ""
	}
	c, err := policy.ParseShockwaveConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c.Info
}

func TestCoordinator_InfoFlagSetsShockwavesInformationMode(t *testing.T) {
	cfg, err := coordinatorConfig(t, "--info", "profile")
	if err != nil || infoOf(t, cfg) != policy.InfoProfile {
		t.Fatalf("--info profile: %v, info %q", err, infoOf(t, cfg))
	}
	conf := writeFile(t, "sw.json", `{"info": "profile", "k": 1e-3}`)
	cfg, err = coordinatorConfig(t, "--config", conf, "--info", "online")
	if err != nil || infoOf(t, cfg) != policy.InfoOnline {
		t.Fatalf("--info online over a config saying profile: %v, info %q", err, infoOf(t, cfg))
	}
	if !strings.Contains(string(cfg.PolicyOptions.Config.(json.RawMessage)), `"k":`) {
		t.Errorf("the config's other keys were lost: %s", cfg.PolicyOptions.Config)
	}
	cfg, err = coordinatorConfig(t, "--config", conf)
	if err != nil || infoOf(t, cfg) != policy.InfoProfile {
		t.Fatalf("without --info the config's key stands: %v, info %q", err, infoOf(t, cfg))
	}
}

func TestCoordinator_BadInfoAndReallocateFlagsAreOneLineAndExitCode2(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--info", "oracle"}, `unknown mode "oracle"`},
		{[]string{"--info", "profile", "--policy", "gavel"}, "only the shockwave policy"},
		{[]string{"--info", "profile", "--config", writeFile(t, "arr.json", `[1]`)}, "not a JSON object"},
		{[]string{"--info", "profile", "--config", writeFile(t, "bad.json", `{"k": "x"}`)}, "--config"},
		{[]string{"--reallocate-on-change=maybe"}, "reallocate-on-change"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(append([]string{"coordinator", "--gpus", "2", "--data-dir", t.TempDir()}, c.args...)...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || out != "" || !strings.Contains(lines[0], c.want) {
			t.Errorf("%v: exit %d, stderr %q, want status 2 and a line with %q", c.args, code, errOut, c.want)
		}
	}
}

func TestCoordinator_ReallocateOnChangeIsOnForGavelRoundBaselinesAndCanBeTurnedOff(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--policy", "gavel"}, true},
		{[]string{"--policy", "gandiva_fair"}, true},
		{[]string{"--policy", "themis", "--reallocate-on-change=false"}, false},
		{[]string{"--policy", "shockwave"}, false},
	} {
		cfg, err := coordinatorConfig(t, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.PolicyOptions.ReallocateOnChange != c.want {
			t.Errorf("%v: ReallocateOnChange %v, want %v", c.args, cfg.PolicyOptions.ReallocateOnChange, c.want)
		}
		// Only the flag given decides against an existing log's rule.
		if given := slices.ContainsFunc(c.args, func(a string) bool { return strings.HasPrefix(a, "--reallocate-on-change") }); cfg.ReallocateFromLog == given {
			t.Errorf("%v: ReallocateFromLog %v, want %v", c.args, cfg.ReallocateFromLog, !given)
		}
	}
}

// TestCoordinator_GCHoldIsOnUnlessTurnedOff: the coordinator holds the
// collector off around its rounds by default; --gc-hold=false leaves it
// alone.
func TestCoordinator_GCHoldIsOnUnlessTurnedOff(t *testing.T) {
	for _, c := range []struct {
		args []string
		keep bool
	}{{nil, false}, {[]string{"--gc-hold"}, false}, {[]string{"--gc-hold=false"}, true}} {
		cfg, err := coordinatorConfig(t, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.KeepGCPercent != c.keep {
			t.Errorf("%v: KeepGCPercent %v, want %v", c.args, cfg.KeepGCPercent, c.keep)
		}
	}
}

// TestCoordinator_CarryWindowIsAMillisecondUnlessSet: --carry-window sets
// how long carried batches gather into one log record; 0 and negative
// windows append each batch alone, and one over 100ms is refused.
func TestCoordinator_CarryWindowIsAMillisecondUnlessSet(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{{nil, time.Millisecond}, {[]string{"--carry-window", "5ms"}, 5 * time.Millisecond},
		{[]string{"--carry-window", "0"}, -1}, {[]string{"--carry-window", "-1ms"}, -time.Millisecond}} {
		cfg, err := coordinatorConfig(t, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.CarryWindow != c.want {
			t.Errorf("%v: CarryWindow %v, want %v", c.args, cfg.CarryWindow, c.want)
		}
	}
	if _, err := coordinatorConfig(t, "--carry-window", "1s"); err == nil || !strings.Contains(err.Error(), "carry window") {
		t.Errorf("--carry-window 1s: %v, want an error naming the carry window", err)
	}
}

// TestCoordinator_JobMetricsBoundsThePerJobSeries: --job-metrics sets how
// many jobs get per-job series (1,000 unless set; 0: none, which the
// service reads as a negative count), and a negative count is refused.
func TestCoordinator_JobMetricsBoundsThePerJobSeries(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{{nil, coordinator.DefaultJobSeries}, {[]string{"--job-metrics", "50"}, 50}, {[]string{"--job-metrics", "0"}, -1}} {
		cfg, err := coordinatorConfig(t, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.JobSeries != c.want {
			t.Errorf("%v: JobSeries %d, want %d", c.args, cfg.JobSeries, c.want)
		}
	}
	if _, err := coordinatorConfig(t, "--job-metrics", "-2"); err == nil || !strings.Contains(err.Error(), "--job-metrics -2") {
		t.Errorf("--job-metrics -2: %v, want an error naming the flag", err)
	}
}

func TestSimulate_ReallocateOnChangeIsOffUnlessAsked(t *testing.T) {
	args := []string{"simulate", "--generate", "30", "--gpus", "16", "--policy", "gavel", "--format", "json"}
	_, off, e1 := runCLI(args...)
	_, off2, _ := runCLI(args...)
	_, on, e2 := runCLI(append(args, "--reallocate-on-change")...)
	if off == "" || on == "" {
		t.Fatalf("simulate failed: %s %s", e1, e2)
	}
	if off != off2 {
		t.Error("the same simulation gave different output")
	}
	if off == on {
		t.Error("--reallocate-on-change changed nothing on a trace with arrivals")
	}
}
