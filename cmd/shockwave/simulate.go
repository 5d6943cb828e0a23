package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/report"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// displayOrder is the order policies are run and shown in by default.
var displayOrder = []string{"shockwave", "gavel", "themis", "allox", "gandiva_fair", "mst", "ossp"}

func init() {
	commands["simulate"] = command{summary: "replay a trace through the scheduler and compare policies", run: simulate}
}

type simFlags struct {
	trace, throughputs, policies, config, format, plot string
	dump, info, forecasts, nodes, cluster, export      string
	gpus, generate                                     int
	seed                                               uint64
	arrivalGap                                         float64
	round                                              time.Duration
	compat, reallocate                                 bool
	noise                                              noiseFlags
}

func simulate(args []string, stdout, stderr io.Writer) error {
	var f simFlags
	fs := newFlags("simulate", stderr)
	fs.StringVar(&f.trace, "trace", "", "trace `FILE` in the original's 12-field TAB-separated format, or per-job profiles in JSON Lines (*.jsonl) (default: a generated trace)")
	fs.StringVar(&f.export, "export-profiles", "", "write each job's realized per-epoch batch size and throughput (of the first policy's run) into `FILE` (JSON Lines, readable by --trace)")
	fs.StringVar(&f.throughputs, "throughputs", "tacc", "throughput table: the built-in `tacc` or `wisr`, or a FILE in the original JSON format")
	fs.IntVar(&f.gpus, "gpus", 32, "number of GPUs: one node, the flat pool")
	fs.StringVar(&f.nodes, "nodes", "", "`NxK`: N nodes of K GPUs each (instead of --gpus)")
	fs.StringVar(&f.cluster, "cluster", "", "cluster description `FILE` (JSON: nodes with name, gpus, type; instead of --gpus)")
	fs.StringVar(&f.policies, "policy", "", "comma-separated `LIST` of policies (default: all); aliases of the original scripts are accepted")
	fs.StringVar(&f.config, "config", "", "policy configuration `FILE` (the original's Shockwave JSON config)")
	fs.DurationVar(&f.round, "round", 120*time.Second, "round length")
	fs.IntVar(&f.generate, "generate", 120, "generate a trace of `N` jobs (spec §1 process) when no --trace is given")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the generated trace, or of the pollux policy on Pollux workloads")
	fs.Float64Var(&f.arrivalGap, "arrival-gap", 40, "mean gap between the generated trace's arrivals, in `SECONDS` (exponential)")
	fs.StringVar(&f.format, "format", "table", "output format: table or json")
	fs.StringVar(&f.plot, "plot", "", "write charts (PNG) into `DIR`")
	fs.StringVar(&f.dump, "dump-instances", "", "write every market instance the shockwave policy solves into `DIR` (read them with shockwave solve)")
	fs.BoolVar(&f.compat, "compat", false, "reproduce the original simulator's bugs (README: compatibility mode)")
	fs.BoolVar(&f.reallocate, "reallocate-on-change", false, "Gavel-round baselines re-allocate as soon as jobs arrive or leave while GPUs are idle (a live coordinator's default; off here, like the original)")
	fs.StringVar(&f.info, "info", policy.InfoOnline, "what Shockwave's forecasts may read: `online` (events only) or profile (each job's declared schedule, like the original)")
	fs.StringVar(&f.forecasts, "forecast-report", "", "write Shockwave's remaining-time forecasts at 10/25/50/75/90 % of each job's progress, with the truth, into `FILE` (JSON), and print their errors")
	f.noise.register(fs)
	pf := addPolluxFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if ok, err := isPolluxTrace(f.trace); err != nil {
		return err
	} else if ok {
		return simulatePollux(&f, pf, stdout, stderr)
	}
	gpusSet := false
	fs.Visit(func(fl *flag.Flag) { gpusSet = gpusSet || fl.Name == "gpus" })
	cfg, err := f.load(gpusSet)
	if err != nil {
		return err
	}
	names, err := policyList(f.policies)
	if err != nil {
		return err
	}
	if f.dump != "" {
		if cfg.Options.OnSolve, err = instanceDumper(f.dump); err != nil {
			return err
		}
	}
	cfg.RecordProfiles = f.export != ""
	if f.forecasts != "" {
		if !slices.Contains(names, "shockwave") {
			return badInput("--forecast-report: needs the shockwave policy in --policy")
		}
		cfg.Forecasts = true
	}
	results, err := runAll(cfg, names, stderr)
	if err != nil {
		return err
	}
	switch f.format {
	case "json":
		err = report.WriteJSON(stdout, results)
	default:
		err = report.WriteTable(stdout, results)
	}
	if err != nil {
		return err
	}
	if f.export != "" {
		if err := writeProfiles(f.export, results[0], stderr); err != nil {
			return err
		}
	}
	if f.plot != "" {
		if err := report.Plot(f.plot, results); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "charts written to %s\n", f.plot)
	}
	if f.forecasts != "" {
		i := slices.Index(names, "shockwave")
		// With --format json stdout holds the one JSON document; the
		// summary table goes to stderr (the file has it too).
		w := stdout
		if f.format == "json" {
			w = stderr
		}
		return writeForecastReport(f.forecasts, f.info, results[i], w)
	}
	return nil
}

// load validates the flags and builds the simulation inputs.
func (f *simFlags) load(gpusSet bool) (sim.Config, error) {
	var cfg sim.Config
	if f.format != "table" && f.format != "json" {
		return cfg, badInput("--format: unknown format %q (want table or json)", f.format)
	}
	if f.gpus <= 0 {
		return cfg, badInput("--gpus: GPU count must be positive, got %d", f.gpus)
	}
	if f.round < time.Second || f.round > 24*time.Hour {
		return cfg, badInput("--round: %v out of range [1s, 24h]", f.round)
	}
	thr, err := loadThroughputs(f.throughputs)
	if err != nil {
		return cfg, err
	}
	jobs, err := f.jobs(thr)
	if err != nil {
		return cfg, err
	}
	cfg = sim.Config{Jobs: jobs, Throughputs: thr, GPUs: f.gpus, RoundSeconds: f.round.Seconds(), Compat: f.compat}
	if cfg.Cluster, err = clusterFlags(f.nodes, f.cluster, gpusSet); err != nil {
		return cfg, err
	}
	if len(cfg.Cluster.Nodes) > 0 {
		cfg.GPUs = cfg.Cluster.GPUs()
	}
	if cfg.Noise, err = f.noise.noise(); err != nil {
		return cfg, err
	}
	sw := policy.DefaultShockwaveConfig()
	if f.config != "" {
		raw, err := os.ReadFile(f.config)
		if err != nil {
			return cfg, badInput("--config: %v", err)
		}
		if !json.Valid(raw) {
			return cfg, badInput("--config: %s is not valid JSON", f.config)
		}
		if sw, err = policy.ParseShockwaveConfig(raw); err != nil {
			return cfg, badInput("--config: %s: %v", f.config, err)
		}
	}
	if f.info != policy.InfoOnline && f.info != policy.InfoProfile {
		return cfg, badInput("--info: unknown mode %q (want online or profile)", f.info)
	}
	sw.Info = f.info
	cfg.Options.Config = sw
	cfg.Options.ReallocateOnChange = f.reallocate
	if err := sim.CheckWorkload(jobs, thr); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

func loadThroughputs(name string) (*workload.Throughputs, error) {
	if name == "tacc" || name == "wisr" {
		return workload.Builtin(name)
	}
	thr, err := workload.LoadThroughputs(name)
	if err != nil {
		return nil, usageError{err}
	}
	return thr, nil
}

func (f *simFlags) jobs(thr *workload.Throughputs) ([]workload.Spec, error) {
	if f.trace != "" {
		jobs, err := readJobs(f.trace)
		if err != nil {
			return nil, usageError{err}
		}
		return jobs, nil
	}
	if f.generate <= 0 {
		return nil, badInput("--generate: job count must be positive, got %d", f.generate)
	}
	if !(f.arrivalGap > 0) || math.IsInf(f.arrivalGap, 0) {
		return nil, badInput("--arrival-gap: mean gap must be a positive number of seconds, got %v", f.arrivalGap)
	}
	return workload.Generate(f.generate, f.seed, thr, workload.GenerateOptions{MeanInterArrival: f.arrivalGap})
}

// policyList resolves a comma-separated list of policy names.
func policyList(list string) ([]string, error) {
	var names []string
	if strings.TrimSpace(list) == "" || list == "all" {
		for _, n := range displayOrder {
			if _, err := policy.Canonical(n); err == nil {
				names = append(names, n)
			}
		}
		return names, nil
	}
	seen := map[string]bool{}
	for _, raw := range strings.Split(list, ",") {
		n, err := policy.Canonical(raw)
		if err != nil {
			if strings.TrimSpace(strings.ToLower(raw)) == "shockwave" {
				return nil, badInput("--policy: the shockwave policy arrives with the market solver; available now: %s", strings.Join(policy.Names(), ", "))
			}
			return nil, usageError{err}
		}
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return names, nil
}

// runAll simulates every policy, in parallel, and returns the results in
// the order of names. Progress goes to stderr.
func runAll(base sim.Config, names []string, stderr io.Writer) ([]*sim.Result, error) {
	results := make([]*sim.Result, len(names))
	errs := make([]error, len(names))
	prog := newProgress(stderr, len(base.Jobs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cfg := base
			cfg.Policy = name
			cfg.OnRound = func(round, done, total int) { prog.update(name, round, done) }
			start := time.Now()
			results[i], errs[i] = sim.Run(cfg)
			if errs[i] == nil {
				prog.finished(name, results[i].Rounds, time.Since(start))
			}
		}()
	}
	wg.Wait()
	return results, errors.Join(errs...)
}
