package pollux

import (
	"fmt"
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/policy"
)

// Batch modes of the project's policies on Pollux workloads.
const (
	// BatchTrace keeps each job's trace width and batch size, like the
	// TunedJobs baselines.
	BatchTrace = "trace"
	// BatchAgent lets the job choose its batch size for the GPUs it holds
	// with the AdaptDL agent's goodput rule (its fitted model, re-optimised
	// every epoch and allocation), so its speed changes while it runs and
	// the policy must forecast it online; and since the job adapts to any
	// width, the adapter may run it narrower than its trace width
	// (Project.Elastic, elasticWidths).
	BatchAgent = "agent"
)

// Project runs one of the project's policies (package policy: shockwave,
// gavel, themis, …) on a Pollux workload. Each round it hands the policy a
// snapshot of the active jobs and runs, gang-scheduled at their width (the
// trace width, or the elastic width in BatchAgent mode), the jobs the plan
// names; jobs that keep running at the same width keep their GPUs, newly
// started ones are placed in the plan's order (most free nodes first, or
// best fit for elastic jobs). Progress is counted in
// Pollux's unit, steps at the initial batch size, so a job's throughput is
// its goodput: in BatchAgent mode it changes with the job's own batch-size
// choices and its epoch's gradient noise, which is what Shockwave's online
// forecaster follows.
type Project struct {
	pol      policy.Policy
	batch    string
	round    int
	known    map[*Job]*policy.Job
	order    []*Job
	lastProg map[*Job]float64
	lastBusy map[*Job]float64
	// Declared is each job's isolated throughput at its trace
	// configuration, steps/s (what the original's traces declare to the
	// throughput-based baselines); zero means unknown until measured.
	Declared map[string]float64
	// Every is the policy's round in intervals (default 1): between rounds
	// running jobs keep their GPUs and nothing new starts.
	Every int
	// Elastic lets jobs run narrower than their trace width (default: on
	// in BatchAgent mode, where the job adapts its batch size to the GPUs
	// it holds): each round elasticWidths sets every job's width, at most
	// its trace width, from the speedups the jobs report, and the policy
	// schedules jobs at those widths.
	Elastic bool
	calls   int
}

// NewProject wraps a project policy for the Pollux world.
func NewProject(name string, opts policy.Options, batch string) (*Project, error) {
	if batch != BatchTrace && batch != BatchAgent {
		return nil, fmt.Errorf("pollux: batch mode %q must be %q or %q", batch, BatchTrace, BatchAgent)
	}
	p, err := policy.New(name, opts)
	if err != nil {
		return nil, err
	}
	return &Project{pol: p, batch: batch, Elastic: batch == BatchAgent, known: map[*Job]*policy.Job{}, lastProg: map[*Job]float64{}, lastBusy: map[*Job]float64{}}, nil
}

// Name implements Policy.
func (p *Project) Name() string {
	if p.batch == BatchAgent {
		return p.pol.Name() + "+agent"
	}
	return p.pol.Name()
}

// Setup configures a job for the batch mode: the trace width to start
// with, and the trace batch size in BatchTrace mode (ncf's in both, as Pollux fixes
// ncf's too).
func (p *Project) Setup(j *Job) {
	j.TargetReplicas = j.Replicas
	if p.batch == BatchTrace || j.App.Name == "ncf" {
		j.TargetBatch = j.BatchSize
	}
}

func (p *Project) admit(now int, j *Job) *policy.Job {
	app := j.App
	perEpoch := app.ProgressToFinish() / float64(app.MaxEpochs)
	pj := &policy.Job{
		ID: j.Name, Seq: len(p.order), Model: app.Name, Workers: j.TargetReplicas,
		SubmitTime: float64(j.Submit), AdmitTime: float64(now), AdmitRound: p.round,
		InitialBatchSize: app.InitBsz, BatchSize: app.InitBsz,
		DatasetSize: int(math.Round(perEpoch * float64(app.InitBsz))),
		TotalSteps:  int64(math.Ceil(app.ProgressToFinish())),
		Throughput:  p.Declared[j.Name], LastRun: -1,
	}
	if p.batch == BatchAgent {
		pj.Mode = "gns"
	}
	p.known[j] = pj
	p.order = append(p.order, j)
	p.pol.Admit(pj)
	return pj
}

// Allocate implements Policy.
func (p *Project) Allocate(now int, active []*Job, cl *Cluster) ([][]int, error) {
	p.calls++
	if p.Every > 1 && (p.calls-1)%p.Every != 0 {
		allocs := make([][]int, len(active))
		for i, j := range active {
			allocs[i] = j.Alloc
		}
		return allocs, nil
	}
	in := make(map[*Job]bool, len(active))
	for _, j := range active {
		in[j] = true
	}
	kept := p.order[:0]
	for _, j := range p.order {
		pj := p.known[j]
		p.observe(j, pj)
		if in[j] {
			kept = append(kept, j)
			continue
		}
		if c, ok := p.pol.(policy.Completer); ok && j.Done() {
			c.Complete(pj)
		} else {
			p.pol.Remove(pj.ID)
		}
		delete(p.known, j)
	}
	p.order = kept
	if p.Elastic {
		p.setWidths(active, cl)
	}
	snap := &policy.Snapshot{Round: p.round, Now: float64(now), GPUs: cl.GPUs, RoundSeconds: float64(DefaultInterval * max(p.Every, 1))}
	byID := make(map[string]int, len(active))
	for i, j := range active {
		pj, ok := p.known[j]
		if !ok {
			pj = p.admit(now, j)
		}
		snap.Jobs = append(snap.Jobs, pj)
		byID[pj.ID] = i
	}
	plan, err := p.pol.Allocate(snap)
	if err != nil {
		return nil, err
	}
	p.round++
	allocs := make([][]int, len(active))
	run := make([]bool, len(active))
	gpus := 0
	for _, id := range plan.Run {
		i, ok := byID[id]
		if !ok || run[i] {
			return nil, fmt.Errorf("%s: plan names unknown or repeated job %q", p.pol.Name(), id)
		}
		run[i] = true
		gpus += active[i].TargetReplicas
		if active[i].Alloc != nil && len(active[i].Alloc) == active[i].TargetReplicas {
			allocs[i] = active[i].Alloc
		}
	}
	if gpus > cl.GPUs {
		return nil, fmt.Errorf("%s: plan needs %d GPUs of %d", p.pol.Name(), gpus, cl.GPUs)
	}
	free := freeGPUs(cl, allocs)
	for _, id := range plan.Run { // in the plan's order, as the native gang policies place
		i := byID[id]
		j := active[i]
		p.known[j].LastRun = snap.Round
		if allocs[i] == nil {
			place := placeMostFree
			if p.Elastic {
				place = placePacked
			}
			if allocs[i] = place(free, j.TargetReplicas); allocs[i] == nil {
				return nil, fmt.Errorf("%s: no room for job %s", p.pol.Name(), j.Name)
			}
		}
	}
	return allocs, nil
}

// observe folds the last interval of j into its policy view, as a job's
// SDK would report it: progress, execution time, and the measured rate.
func (p *Project) observe(j *Job, pj *policy.Job) {
	dp, db := j.Progress-p.lastProg[j], j.Busy-p.lastBusy[j]
	p.lastProg[j], p.lastBusy[j] = j.Progress, j.Busy
	if db <= 0 && dp <= 0 {
		return
	}
	before := pj.StepsDone
	pj.StepsDone = min(int64(math.Floor(j.Progress)), pj.TotalSteps)
	pj.RunTime = j.Busy
	pj.Epoch = j.Epoch
	if db > 0 && dp > 0 {
		rate := dp / db
		pj.Throughput = rate
		pj.Measurements = append(pj.Measurements, policy.Measurement{Round: p.round, Throughput: rate, BatchSize: pj.BatchSize})
	}
	p.pol.Observe(pj.ID, db, pj.StepsDone-before)
}

// setWidths applies the elastic widths of the active jobs
// (elasticWidths), from each job's reports.
func (p *Project) setWidths(active []*Job, cl *Cluster) {
	jobs, cur := make([]widthJob, len(active)), make([]int, len(active))
	nodeGPUs := slices.Max(cl.Capacity)
	for i, j := range active {
		jobs[i], cur[i] = newWidthJob(j, nodeGPUs), len(j.Alloc)
	}
	for i, w := range elasticWidths(jobs, cur, cl.GPUs) {
		j := active[i]
		j.TargetReplicas = w
		if pj, ok := p.known[j]; ok {
			pj.Workers = w
		}
	}
}
