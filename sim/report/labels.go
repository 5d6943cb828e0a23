package report

import (
	"errors"
	"fmt"
	"image/color"
	"strings"

	"github.com/shockwave-sched/shockwave/sim"
)

// displayNames maps policy names (the original's and this project's
// aliases) to the names the paper uses.
var displayNames = map[string]string{
	"shockwave":               "Shockwave",
	"max_min_fairness":        "Gavel",
	"gavel":                   "Gavel",
	"finish_time_fairness":    "Themis",
	"themis":                  "Themis",
	"allox":                   "AlloX",
	"gandiva_fair":            "Gandiva-Fair",
	"gandiva-fair":            "Gandiva-Fair",
	"gandiva":                 "Gandiva-Fair",
	"max_sum_throughput_perf": "MST",
	"mst":                     "MST",
	"min_total_duration":      "OSSP",
	"ossp":                    "OSSP",
}

// label is the name a person reads for a policy.
func label(policy string) string {
	if n, ok := displayNames[strings.ToLower(policy)]; ok {
		return n
	}
	if policy == "" {
		return "(unnamed)"
	}
	return policy
}

// check rejects inputs no output can be made of.
func check(results []*sim.Result) error {
	for i, r := range results {
		if r == nil {
			return fmt.Errorf("report: result %d is nil", i)
		}
	}
	return nil
}

// errNoResults is returned by Plot when there is nothing to draw.
var errNoResults = errors.New("report: no results to plot")

// workload describes the jobs and GPUs the results share, e.g.
// "120 jobs, 32 GPUs" (and "on nodes 4x8" for a cluster of nodes); uniform
// is false when they differ.
func workload(results []*sim.Result) (desc string, uniform bool) {
	if len(results) == 0 {
		return "no results", true
	}
	jobs, gpus, nodes := results[0].Jobs, results[0].GPUs, results[0].Nodes
	for _, r := range results[1:] {
		if r.Jobs != jobs || r.GPUs != gpus || r.Nodes != nodes {
			return "mixed workloads", false
		}
	}
	desc = fmt.Sprintf("%d %s, %d %s", jobs, plural(jobs, "job", "jobs"), gpus, plural(gpus, "GPU", "GPUs"))
	if nodes != "" {
		desc += " on nodes " + nodes
	}
	return desc, true
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// palette is matplotlib's "tab10", a set of ten colours that stay distinct
// on white and in print.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
	{0xbc, 0xbd, 0x22, 0xff}, // olive
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
}

// policyColor is the colour of the i-th result in every chart.
func policyColor(i int) color.RGBA { return palette[i%len(palette)] }
