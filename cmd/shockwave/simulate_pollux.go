package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/sim/pollux"
	"github.com/shockwave-sched/shockwave/topology"
)

// polluxOrder is the default policy list on Pollux workloads: the
// artifact's three, then the project's in both batch modes.
var polluxOrder = []string{"pollux", "optimus", "tiresias", "shockwave", "gavel", "themis"}

// polluxFlags are the simulate flags of Pollux workloads.
type polluxFlags struct {
	apps, batch, published string
}

func addPolluxFlags(fs *flag.FlagSet) *polluxFlags {
	var p polluxFlags
	fs.StringVar(&p.apps, "apps", "pollux", "application models of a Pollux workload: the built-in `pollux` tables")
	fs.StringVar(&p.batch, "batch", "both", "on Pollux workloads, how the project's policies run jobs: `trace` (trace width and batch size), agent (the AdaptDL agent picks the batch size, and jobs may run narrower than the trace width when the cluster is oversubscribed) or both")
	fs.StringVar(&p.published, "published", "", "on Pollux workloads, a published-avg-jct.json `FILE` whose averages for this workload are printed beside ours")
	return &p
}

// isPolluxTrace reports whether the trace file has the Pollux header.
func isPolluxTrace(path string) (bool, error) {
	if path == "" {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, usageError{err}
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	return pollux.IsWorkload(head[:n]), nil
}

func (p *polluxFlags) specs(list string) ([]pollux.Spec, error) {
	var modes []string
	switch p.batch {
	case "trace":
		modes = []string{pollux.BatchTrace}
	case "agent":
		modes = []string{pollux.BatchAgent}
	case "both":
		modes = []string{pollux.BatchTrace, pollux.BatchAgent}
	default:
		return nil, badInput("--batch: unknown mode %q (want trace, agent or both)", p.batch)
	}
	names := polluxOrder
	if s := strings.TrimSpace(list); s != "" && s != "all" {
		names = strings.Split(s, ",")
	}
	var out []pollux.Spec
	seen := map[pollux.Spec]bool{}
	add := func(s pollux.Spec) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, raw := range names {
		n := strings.ToLower(strings.TrimSpace(raw))
		if pollux.IsNative(n) {
			add(pollux.Spec{Policy: n})
			continue
		}
		c, err := policy.Canonical(n)
		if err != nil {
			return nil, badInput("--policy: %v (Pollux workloads also take pollux, optimus, tiresias)", err)
		}
		for _, m := range modes {
			add(pollux.Spec{Policy: c, Batch: m})
		}
	}
	return out, nil
}

// simulatePollux runs a Pollux workload (sim/pollux).
func simulatePollux(f *simFlags, p *polluxFlags, stdout, stderr io.Writer) error {
	if p.apps != "pollux" {
		return badInput("--apps: unknown application tables %q (want pollux)", p.apps)
	}
	apps, err := pollux.BuiltinApps()
	if err != nil {
		return err
	}
	// --nodes and --cluster are simulate's; a Pollux workload defaults to
	// the artifact's 16 nodes of 4 GPUs (--gpus, a flat pool, does not apply).
	nodes := topology.Uniform(16, 4)
	switch {
	case f.nodes != "" && f.cluster != "":
		return badInput("--nodes and --cluster: give one")
	case f.nodes != "":
		if nodes, err = topology.ParseNodes(f.nodes); err != nil {
			return badInput("--nodes: %v", err)
		}
	case f.cluster != "":
		if nodes, err = topology.Load(f.cluster); err != nil {
			return badInput("--cluster: %v", err)
		}
	}
	if _, err := pollux.NewCluster(nodes); err != nil {
		return badInput("--nodes: %v", err)
	}
	if f.format != "table" && f.format != "json" {
		return badInput("--format: unknown format %q (want table or json)", f.format)
	}
	round := int(f.round.Seconds())
	if f.round.Seconds() != float64(round) || round <= 0 || round%pollux.DefaultInterval != 0 {
		return badInput("--round: %v must be a positive multiple of Pollux's %d s interval", f.round, pollux.DefaultInterval)
	}
	if f.info != policy.InfoOnline && f.info != policy.InfoProfile {
		return badInput("--info: unknown mode %q (want online or profile)", f.info)
	}
	specs, err := p.specs(f.policies)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(f.trace)
	if err != nil {
		return usageError{err}
	}
	rows, err := pollux.ParseWorkload(bytes.NewReader(raw), apps)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", f.trace, err)}
	}
	var pub map[string]float64
	if p.published != "" {
		if pub, err = readPublished(p.published, f.trace); err != nil {
			return err
		}
	}
	sw := policy.DefaultShockwaveConfig()
	if f.config != "" {
		cfgRaw, err := os.ReadFile(f.config)
		if err != nil {
			return badInput("--config: %v", err)
		}
		if sw, err = policy.ParseShockwaveConfig(cfgRaw); err != nil {
			return badInput("--config: %s: %v", f.config, err)
		}
	}
	sw.Info = f.info
	o := pollux.Options{Apps: apps, Nodes: nodes, Seed: f.seed, RoundSeconds: round, Policy: policy.Options{Config: sw}}
	results, err := pollux.Compare(rows, specs, o)
	if err != nil {
		return err
	}
	if f.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return writePolluxTable(stdout, filepath.Base(f.trace), nodes, len(rows), results, pub)
}

func writePolluxTable(w io.Writer, name string, nodes topology.Cluster, jobs int, results []*pollux.Result, pub map[string]float64) error {
	fmt.Fprintf(w, "Pollux workload %s: %d jobs on %s (%d GPUs)\n", name, jobs, nodes.String(), nodes.GPUs())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "policy\tavg JCT (s)\tmakespan (s)\tworst ρ\tρ>1.05\t"
	if pub != nil {
		head += "published avg JCT (s)\tours/published\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range results {
		line := fmt.Sprintf("%s\t%.1f\t%d\t%.2f\t%.0f%%\t", r.Policy, r.AvgJCT, r.Makespan, r.WorstRho, 100*r.UnfairShare)
		if pub != nil {
			if v, ok := pub[r.Policy]; ok {
				line += fmt.Sprintf("%.1f\t%.3f\t", v, r.AvgJCT/v)
			} else {
				line += "\t\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// readPublished reads the published averages of the trace's workload
// (named by the file, e.g. workload-3) from a published-avg-jct.json.
func readPublished(path, trace string) (map[string]float64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, badInput("--published: %v", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, badInput("--published: %s: %v", path, err)
	}
	key := strings.TrimSuffix(filepath.Base(trace), filepath.Ext(trace))
	out := map[string]float64{}
	for _, pol := range pollux.Native {
		var byLoad map[string]map[string]float64
		if m, ok := doc[pol]; ok {
			if err := json.Unmarshal(m, &byLoad); err != nil {
				return nil, badInput("--published: %s: %s: %v", path, pol, err)
			}
		}
		if v, ok := byLoad["1.0"][key]; ok {
			out[pol] = v
		}
	}
	return out, nil
}
