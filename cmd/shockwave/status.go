package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

func init() {
	commands["status"] = command{summary: "print the job table and the last plan of a running coordinator", run: runStatus}
}

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	url := fs.String("nats-url", nats.DefaultURL, "NATS address of the coordinator")
	creds := fs.String("creds", "", "credentials `FILE` (shockwave creds issue --admin)")
	token := fs.String("token", "", "admin token (the coordinator's DATA-DIR/auth/admin.secret in none and token mode)")
	tokenFile := fs.String("token-file", "", "read the admin token from `FILE` (e.g. DATA-DIR/auth/admin.secret)")
	var tls tlsFlags
	tls.register(fs)
	prefix := fs.String("prefix", protocol.DefaultPrefix, "subject prefix")
	job := fs.String("job", "", "show only this job")
	limit := fs.Int("limit", 0, "list at most `N` jobs, those furthest from their fair share first (0: all that fit in one message)")
	format := fs.String("format", "table", "output format: table or json")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the coordinator")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		return badInput("--limit: %d is negative (0 lists every job that fits)", *limit)
	}
	if *format != "table" && *format != "json" {
		return badInput("--format: unknown format %q (want table or json)", *format)
	}
	subj, err := protocol.NewSubjects(*prefix)
	if err != nil {
		return usageError{err}
	}
	if *job != "" {
		if err := protocol.ValidateJobID("status", *job); err != nil {
			return usageError{err}
		}
	}
	if *token, err = readToken(*token, *tokenFile, false); err != nil {
		return err
	}
	opts, err := tls.options()
	if err != nil {
		return err
	}
	opts = append(opts, nats.Name("shockwave-status"), nats.Timeout(*timeout))
	if *creds != "" {
		opts = append(opts, nats.UserCredentials(*creds))
	}
	if *token != "" {
		opts = append(opts, nats.Token(*token))
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", *url, err)
	}
	defer nc.Close()
	req, _ := json.Marshal(protocol.StatusRequest{V: protocol.Version, Job: *job, Limit: *limit})
	m, err := nc.Request(subj.Status(), req, *timeout)
	if err != nil {
		return fmt.Errorf("no answer on %s from a coordinator at %s: %w", subj.Status(), *url, err)
	}
	rep, err := protocol.DecodeStatusReply(m.Data, 1<<30)
	if err != nil {
		return err
	}
	if rep.Error != nil {
		return fmt.Errorf("coordinator: %s", rep.Error.Message)
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printStatus(stdout, rep)
}

// printStatus writes the job table and the last plan for people.
func printStatus(w io.Writer, r *protocol.StatusReply) error {
	state := ""
	if r.Recovering {
		state = " · RECOVERING (replaying its log)"
	}
	where := ""
	if len(r.Nodes) > 1 {
		where = fmt.Sprintf(" on %d nodes", len(r.Nodes))
	}
	fmt.Fprintf(w, "policy %s · %d GPUs%s · %gs rounds · next round %d · log record %d%s\n\n",
		r.Policy, r.GPUs, where, r.RoundSeconds, r.Round, r.LogSeq, state)
	if r.JobsTotal > len(r.Jobs) {
		fmt.Fprintf(w, "%d of %d jobs listed: the unfinished ones furthest from their fair share first (--limit N for fewer, --job ID for one)\n\n", len(r.Jobs), r.JobsTotal)
	}
	if err := printJobs(w, r); err != nil {
		return err
	}
	printReasons(w, r.Jobs)
	if r.Plan == nil {
		_, err := fmt.Fprintln(w, "\nno round scheduled yet")
		return err
	}
	how := "followed the stored plan"
	if r.Plan.Solved {
		how = "re-solved"
	}
	run := strings.Join(r.Plan.Run, " ")
	if run == "" {
		run = "nothing"
	}
	fmt.Fprintf(w, "\nplan of round %d (%s): run %s\n", r.Plan.Round, how, run)
	if r.Plan.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Plan.Note)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tRUN\tSHARE\tROUNDS\tFORECAST\tP10–P90\tPRIOR\tBATCH\tP(CHANGE)\tFAIR FINISH\tρ\tWHY NOT")
	for _, e := range r.Plan.Explain {
		band := "-"
		if e.ForecastP90 > 0 {
			band = secs(e.ForecastP10) + "–" + secs(e.ForecastP90)
		}
		prior := dash(e.ForecastPrior)
		if e.ForecastWaiting { // older than the job's latest report (over the forecast budget)
			prior += ", waiting (ran " + secs(e.ForecastRunSince) + " since)"
		}
		fmt.Fprintf(tw, "%s\t%v\t%.2f\t%d\t%s\t%s\t%s\t%s\t%.2f\t%s\t%.2f\t%s\n", e.Job, e.Run, e.Share, e.PlannedRounds,
			secs(e.ForecastRemaining), band, prior, count(e.Regime), e.ChangeProb,
			fairFinish(e.FairShareFinish, r.Now), e.ProjectedRho, e.Reason)
	}
	return tw.Flush()
}

const jobHeader = "JOB\tSTATE\tMODEL\tWORKERS\tBS\tSTEPS\tEPOCH\tSTEPS/S\tRUN TIME\tLAST RUN\tGPUS\tDEVICES"

// printJobs writes the job table grouped by node: each node's heading
// (GPUs, type, devices in use) and the jobs holding devices there, with
// their cluster-wide ids and local device indices on that node (a gang
// spanning nodes is listed under each), then the jobs that hold none.
// A reply without nodes (an older coordinator) is one table.
func printJobs(w io.Writer, r *protocol.StatusReply) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Nodes) == 0 {
		fmt.Fprintln(tw, "  "+jobHeader)
		for _, j := range r.Jobs {
			jobRow(tw, j, "")
		}
		return tw.Flush()
	}
	placed := map[string]bool{}
	for _, n := range r.Nodes {
		label := fmt.Sprintf("%s · %d GPUs", n.Name, n.GPUs)
		if n.Type != "" {
			label += " · " + n.Type
		}
		if n.Relay {
			label += " · agent relays leases"
		}
		fmt.Fprintf(tw, "%s · %d in use\n", label, n.Used)
		any := false
		for _, j := range r.Jobs {
			for _, nd := range j.Devices {
				if nd.Node == n.Name {
					if !any {
						fmt.Fprintln(tw, "  "+jobHeader)
						any = true
					}
					jobRow(tw, j, strings.Trim(fmt.Sprint(nd.Devices), "[]"))
					placed[j.Job] = true
				}
			}
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "jobs holding no devices")
	fmt.Fprintln(tw, "  "+jobHeader)
	for _, j := range r.Jobs {
		if !placed[j.Job] {
			jobRow(tw, j, "")
		}
	}
	return tw.Flush()
}

func jobRow(w io.Writer, j protocol.JobInfo, devices string) {
	gpus := "-"
	if len(j.GPUs) > 0 {
		gpus = strings.Trim(fmt.Sprint(j.GPUs), "[]")
	}
	if devices == "" {
		devices = "-"
		if j.Node != "" {
			devices = "resident on " + j.Node
		}
	}
	last := "-"
	if j.LastRun >= 0 {
		last = fmt.Sprint(j.LastRun)
	}
	state := j.State
	if j.Leases != "" {
		state += " (leases " + j.Leases + ")"
	}
	fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%d\t%d/%d\t%d\t%.3g\t%s\t%s\t%s\t%s\n", j.Job, state, j.Model, j.Workers,
		j.BatchSize, j.StepsDone, j.TotalSteps, j.Epoch, j.Throughput,
		(time.Duration(j.RunTime) * time.Second).String(), last, gpus, devices)
}

func secs(s float64) string {
	if s == 0 {
		return "-"
	}
	return (time.Duration(s) * time.Second).String()
}

// fairFinish shows a fair-share finish time (seconds on the coordinator's
// clock, like now) relative to now: "in 1h2m3s" or "5m0s ago".
func fairFinish(at, now float64) string {
	if at <= 0 || now <= 0 {
		return "-"
	}
	d := (time.Duration(at-now) * time.Second).Round(time.Second)
	if at-now < 0 {
		return (-d).String() + " ago"
	}
	return "in " + d.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func count(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// printReasons lists why jobs failed, expired or were cancelled, and the
// last failed exit of a running submitted job.
func printReasons(w io.Writer, jobs []protocol.JobInfo) {
	first := true
	for _, j := range jobs {
		if j.Reason == "" || j.State == "completed" {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		fmt.Fprintf(w, "%s %s: %s\n", j.Job, j.State, j.Reason)
	}
}
