package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/shockwave-sched/shockwave/sim"
)

// forecastReport is the file --forecast-report writes.
type forecastReport struct {
	Info    string              `json:"info"` // the policy's information mode
	Summary []forecastSummary   `json:"summary"`
	Slices  []sim.SliceError    `json:"slices"` // by slice (sim.SliceNames), then mark
	Points  []sim.ForecastPoint `json:"points"`
}

// forecastSummary compares, at one progress mark (0: all marks), the
// forecasts the policy used with the original's profile estimator.
type forecastSummary struct {
	Mark    float64           `json:"mark"`
	Used    sim.ForecastError `json:"used"`
	Profile sim.ForecastError `json:"profile"`
}

// writeForecastReport writes res's forecast points into path and prints
// their median and p90 absolute percentage errors.
func writeForecastReport(path, info string, res *sim.Result, stdout io.Writer) error {
	rep := forecastReport{Info: info, Points: res.Forecasts, Slices: sim.ForecastSlices(res.Forecasts)}
	for _, m := range append(sim.ForecastMarks, 0) {
		u, p := sim.ForecastErrors(res.Forecasts, m)
		rep.Summary = append(rep.Summary, forecastSummary{Mark: m, Used: u, Profile: p})
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--forecast-report: %w", err)
	}
	fmt.Fprintf(stdout, "\nremaining-time forecasts (absolute percentage error; %d points of %d completed jobs, written to %s):\n\n",
		len(res.Forecasts), countJobs(res.Forecasts), path)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "progress\t%s median\t%s p90\tin [p10,p90]\tprofile median\tprofile p90\t\n", info, info)
	for _, s := range rep.Summary {
		label := "all"
		if s.Mark > 0 {
			label = fmt.Sprintf("%.0f %%", 100*s.Mark)
		}
		cover := "-"
		if s.Used.CoverP1090 > 0 {
			cover = fmt.Sprintf("%.0f %%", 100*s.Used.CoverP1090)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", label, pct(s.Used.MedianAPE, s.Used.Points), pct(s.Used.P90APE, s.Used.Points),
			cover, pct(s.Profile.MedianAPE, s.Profile.Points), pct(s.Profile.P90APE, s.Profile.Points))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nby slice (first of recipe: no job of its recipe admitted before it; no finished peer / peer finished: whether a job of its recipe had completed by the point; change ahead: its batch size changed after the point):\n\n")
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "slice\tprogress\tpoints\t%s median\t%s p90\tin [p10,p90]\tprofile median\tprofile p90\t\n", info, info)
	for _, s := range rep.Slices {
		label := "all"
		if s.Mark > 0 {
			label = fmt.Sprintf("%.0f %%", 100*s.Mark)
		}
		cover := "-"
		if s.Used.Points > 0 && s.Used.CoverP1090 >= 0 && info == "online" {
			cover = fmt.Sprintf("%.0f %%", 100*s.Used.CoverP1090)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", s.Slice, label, s.Used.Points, pct(s.Used.MedianAPE, s.Used.Points),
			pct(s.Used.P90APE, s.Used.Points), cover, pct(s.Profile.MedianAPE, s.Profile.Points), pct(s.Profile.P90APE, s.Profile.Points))
	}
	return tw.Flush()
}

func pct(x float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*x)
}

func countJobs(ps []sim.ForecastPoint) int {
	seen := map[int]bool{}
	for _, p := range ps {
		seen[p.Job] = true
	}
	return len(seen)
}
