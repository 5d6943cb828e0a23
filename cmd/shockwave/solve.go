package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/shockwave-sched/shockwave/market"
)

func init() {
	commands["solve"] = command{summary: "solve one round's market from a JSON instance and explain the plan", run: solve}
}

// instanceDumper returns a hook that writes each solved instance to
// dir/round-NNNNN.json. Write errors are reported once, on stderr.
func instanceDumper(dir string) (func(*market.Instance), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, badInput("--dump-instances: %v", err)
	}
	failed := false
	return func(in *market.Instance) {
		b, err := json.MarshalIndent(in, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("round-%05d.json", in.Round)), append(b, '\n'), 0o644)
		}
		if err != nil && !failed {
			failed = true
			fmt.Fprintf(os.Stderr, "shockwave simulate: --dump-instances: %v\n", err)
		}
	}, nil
}

// solvedJob is one job's line of the explained plan.
type solvedJob struct {
	ID            string  `json:"id"`
	Workers       int     `json:"workers"`
	RunsNow       bool    `json:"runs_now"`
	PlannedRounds int     `json:"planned_rounds"`
	Remaining     float64 `json:"forecast_remaining_s"`
	FairFinish    float64 `json:"fair_share_finish_s"`
	ProjectedRho  float64 `json:"projected_rho"`
	Priority      float64 `json:"priority"`
	Reason        string  `json:"reason,omitempty"`
}

type solved struct {
	Status    string      `json:"status"`
	Relaxed   bool        `json:"relaxed"`
	Objective float64     `json:"objective"`
	Bound     float64     `json:"bound"`
	Gap       float64     `json:"gap"`
	Price     float64     `json:"price"`
	Schedule  [][]string  `json:"schedule"`
	Jobs      []solvedJob `json:"jobs"`
}

func solve(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("solve", stderr)
	file := fs.String("instance", "", "instance `FILE` (JSON, as written by simulate --dump-instances; schema in package market, type Instance)")
	format := fs.String("format", "table", "output format: table or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return badInput("--instance is required")
	}
	if *format != "table" && *format != "json" {
		return badInput("--format: unknown format %q (want table or json)", *format)
	}
	f, err := os.Open(*file)
	if err != nil {
		return badInput("--instance: %v", err)
	}
	defer f.Close()
	in, err := market.ReadInstance(f)
	if err != nil {
		return badInput("%s: %v", *file, err)
	}
	p, s, err := in.Problem()
	if err != nil {
		return badInput("%s: %v", *file, err)
	}
	res, err := market.Solve(p, s)
	if err != nil {
		return err
	}
	out := explainSolve(p, res)
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return printSolve(stdout, in, out)
}

func explainSolve(p market.Problem, r *market.Result) solved {
	out := solved{Status: r.Status.String(), Relaxed: r.Relaxed, Objective: r.Objective, Bound: r.Bound, Gap: r.Gap, Price: r.Price}
	now := map[int]bool{}
	if len(r.Schedule) > 0 {
		for _, i := range r.Schedule[0] {
			now[i] = true
		}
	}
	for _, round := range r.Schedule {
		ids := make([]string, len(round))
		for k, i := range round {
			ids[k] = p.Jobs[i].ID
		}
		out.Schedule = append(out.Schedule, ids)
	}
	for i, j := range p.Jobs {
		sj := solvedJob{ID: j.ID, Workers: j.Workers, RunsNow: now[i], PlannedRounds: r.Rounds[i],
			Remaining: j.Remaining, FairFinish: j.FairFinish, ProjectedRho: r.Rho[i], Priority: r.Priorities[i]}
		switch {
		case sj.RunsNow:
		case sj.PlannedRounds == 0 && j.Progress >= j.Epochs:
			sj.Reason = "finished its epochs"
		case sj.PlannedRounds == 0:
			sj.Reason = fmt.Sprintf("no rounds in this window: the %d GPU-rounds went to jobs with a higher gain per GPU-round (price %.3g)", len(r.Schedule)*p.GPUs, r.Price)
		default:
			sj.Reason = fmt.Sprintf("its %d rounds come later in the window: jobs further behind their fair share run first", sj.PlannedRounds)
		}
		out.Jobs = append(out.Jobs, sj)
	}
	return out
}

func printSolve(w io.Writer, in *market.Instance, out solved) error {
	fmt.Fprintf(w, "round %d: %d jobs, %d GPUs, window %d rounds of %gs\n", in.Round, len(in.Jobs), in.GPUs, in.FutureRounds, in.RoundSeconds)
	fmt.Fprintf(w, "market %s (relaxed: %v): objective %.6g, bound %.6g, gap %.2g, price of a GPU-round %.4g\n\n",
		out.Status, out.Relaxed, out.Objective, out.Bound, out.Gap, out.Price)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "job\tgpus\tnow\tplanned\tforecast s\tfair finish s\tproj. ρ\tpriority\t")
	for _, j := range out.Jobs {
		now := ""
		if j.RunsNow {
			now = "RUN"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.0f\t%.0f\t%.3f\t%s\t\n", j.ID, j.Workers, now, j.PlannedRounds, j.Remaining, j.FairFinish, j.ProjectedRho, fmtPriority(j.Priority))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, j := range out.Jobs {
		if j.Reason != "" {
			fmt.Fprintf(w, "%s waits: %s\n", j.ID, j.Reason)
		}
	}
	return nil
}

func fmtPriority(p float64) string {
	if p >= 1e6 || (p > 0 && p < 1e-3) || math.IsInf(p, 0) {
		return fmt.Sprintf("%.3g", p)
	}
	return fmt.Sprintf("%.3f", p)
}
