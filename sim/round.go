package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// complete processes the micro-tasks that finished by the start of this
// round, latest finish first, ties by job id (spec §3.3 step 2).
func (r *run) complete(inflight []*simJob, prevStart float64) error {
	slices.SortFunc(inflight, func(a, b *simJob) int {
		if c := cmp.Compare(b.finish, a.finish); c != 0 {
			return c
		}
		return cmp.Compare(a.spec.ID, b.spec.ID)
	})
	for _, j := range inflight {
		j.inFlight = false
		if j.ended {
			continue
		}
		if err := r.finishTask(j, prevStart); err != nil {
			return err
		}
	}
	return nil
}

// finishTask reports one micro-task's outcome to the Core, as a job's SDK
// would: a progress event, then a batch-size change, then done.
func (r *run) finishTask(j *simJob, prevStart float64) error {
	eps := j.finish - prevStart
	n := j.n
	delta := r.cfg.RoundSeconds
	if r.round != 1 && !j.extension && eps != 0 && eps > delta-restartSlackSeconds {
		n = int64(float64(n) * (eps - RestartPenaltySeconds) / eps)
		eps -= RestartPenaltySeconds
	}
	j.lastFinish = j.finish
	if n <= 0 && eps <= 0 {
		return nil // a failed micro-task: no progress to report (spec §3.3 step 2.4)
	}
	st := j.st
	if r.cfg.RecordProfiles {
		j.recordEpochs(n, j.speedNow)
	}
	st.Done += n
	j.exec += eps
	for _, w := range j.workers {
		r.res.busy[w] += eps
	}
	exit, err := r.send(j, protocol.EventProgress, n, eps)
	if err != nil {
		return err
	}
	if exit != nil {
		r.end(j, j.finish) // the run-time limit (spec §3.6)
		return nil
	}
	done := st.TotalSteps-st.Done <= 0
	if !done {
		if ended, err := r.endEarly(j); ended || err != nil {
			return err
		}
	}
	if st.Grow || st.Shrink {
		if st.Rescale(j.spec, r.cfg.Throughputs) {
			j.changes++
			if _, err := r.send(j, protocol.EventBatchSize, 0, 0); err != nil {
				return err
			}
		}
		if !r.cfg.Compat {
			done = done || st.TotalSteps-st.Done <= 0
		}
	}
	if done {
		if _, err := r.send(j, protocol.EventDone, 0, 0); err != nil {
			return err
		}
		r.settleForecasts(j)
		r.end(j, j.finish)
	}
	return nil
}

// send delivers one event of job j to the Core.
func (r *run) send(j *simJob, t protocol.EventType, steps int64, elapsed float64) (*protocol.Lease, error) {
	j.seq++
	st := j.st
	e := protocol.Event{
		V: protocol.Version, Type: t, Job: j.id, Seq: j.seq,
		Steps: steps, Elapsed: elapsed,
		StepsDone: max(st.Done, 0), TotalSteps: st.TotalSteps, BatchSize: st.BatchSize,
		Epoch: int(max(st.Done, 0) / int64(j.itersPerEpoch())), Throughput: st.Throughput,
	}
	l, err := r.core.Apply(r.now, &e)
	if err != nil {
		return nil, fmt.Errorf("sim: job %s: %w", j.id, err)
	}
	return l, nil
}

func (j *simJob) itersPerEpoch() int {
	return workload.IterationsPerEpoch(j.spec.Model, j.st.BatchSize)
}

func (r *run) end(j *simJob, finish float64) {
	j.ended = true
	j.jct = finish - j.spec.Arrival
	j.endRound = r.round
	r.completed++
}

// setFlags evaluates every active job's adaptation rules (spec §3.3 step 3).
func (r *run) setFlags() error {
	for _, j := range r.jobs {
		if j.started && !j.ended {
			j.st.SetFlags(j.spec)
			if j.spec.Profile != nil {
				if err := r.adoptProfile(j); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// admit registers every job that has arrived by now, in trace order.
func (r *run) admit() error {
	for r.next < len(r.jobs) && r.cfg.Jobs[r.next].Arrival <= r.now {
		j := r.jobs[r.next]
		r.next++
		reg, err := j.register(r.cfg.Throughputs)
		if err != nil {
			return fmt.Errorf("sim: job %s: %w", j.id, err)
		}
		if err := r.core.Register(r.now, &reg); err != nil {
			return fmt.Errorf("sim: job %s: %w", j.id, err)
		}
		j.started = true
		j.admitRound = r.round
		j.firstOfRecipe = r.admitted[j.recipe()] == 0
		r.admitted[j.recipe()]++
	}
	return nil
}

// register is what the job's SDK would announce: its shape, its isolated
// throughput, its expected isolated run time and its planned schedule.
// The schedule is built here, not kept from newSimJob (which built it
// once already to check it): the Core copies it, and thousands of jobs
// would otherwise hold a second copy of every epoch for the whole run.
func (j *simJob) register(thr *workload.Throughputs) (protocol.Register, error) {
	sp := j.spec
	prof, err := workload.NewProfile(sp, thr)
	if err != nil {
		return protocol.Register{}, err
	}
	return protocol.Register{
		V: protocol.Version, Job: j.id, Name: sp.JobType, Model: sp.Model, Mode: string(sp.Mode),
		Workers: sp.ScaleFactor, BatchSize: sp.BatchSize, DatasetSize: workload.DatasetSize(sp.Model),
		TotalSteps: sp.TotalSteps, Priority: sp.PriorityWeight, Throughput: j.thr0, // nominal: a job cannot know its draws
		SubmitTime: sp.Arrival, IsolatedSeconds: prof.IsolatedSeconds,
		Schedule: &protocol.Schedule{BatchSizes: prof.BatchSizes, EpochSeconds: prof.EpochSeconds},
	}, nil
}

// schedule ticks the Core and dispatches the micro-tasks of its RUN leases
// (spec §3.3 steps 7-8).
func (r *run) schedule() ([]*simJob, error) {
	rd, err := r.core.Tick(r.now)
	if err != nil {
		return nil, err
	}
	if r.cfg.OnPlan != nil {
		r.cfg.OnPlan(rd)
	}
	if r.cfg.Forecasts {
		r.recordForecasts(rd)
	}
	var inflight []*simJob
	ids := make([]int, 0, len(rd.Plan.Run))
	gpus := 0
	cur := make(map[string][]int, len(rd.Leases))
	for _, l := range rd.Leases {
		j := r.byID[l.Job]
		switch l.Action {
		case protocol.Exit:
			if !j.ended {
				if j.crashed {
					j.early, j.marks = workload.Crashes, nil
				}
				r.end(j, j.lastFinish) // failed leases (spec §3.5)
			}
		case protocol.Run:
			r.dispatch(j, &l)
			inflight = append(inflight, j)
			ids = append(ids, j.spec.ID)
			gpus += len(l.Workers)
			cur[l.Job] = l.Workers
		}
	}
	r.countLeases(cur)
	for _, j := range r.jobs {
		if j.started && !j.ended {
			if _, ok := cur[j.id]; ok {
				j.scheduled++
			} else {
				j.queued++
			}
		}
	}
	slices.Sort(ids)
	r.res.record(rd.Start, rd.Active, gpus, ids)
	return inflight, nil
}

func (r *run) dispatch(j *simJob, l *protocol.Lease) {
	st := j.st
	v := st.Throughput * j.real.RoundFactor() // this round's speed
	n := min(int64(v*r.cfg.RoundSeconds), st.TotalSteps-st.Done)
	if j.crashed {
		n = 0 // a crashed job holds its lease and does nothing
	}
	j.n = n
	j.speedNow = v
	j.finish = r.now
	if v > 0 {
		j.finish += math.Max(0, float64(n)/v)
	}
	j.extension = l.Extension
	j.workers = l.Workers
	j.inFlight = true
}

// countLeases counts lease extensions: jobs that ran in the previous round,
// are still active, and keep exactly the same GPUs (spec §6).
func (r *run) countLeases(cur map[string][]int) {
	for id, ws := range r.prevRun {
		j := r.byID[id]
		if j.ended {
			continue
		}
		r.res.LeaseOpportunities++
		if now, ok := cur[id]; ok && slices.Equal(now, ws) {
			r.res.LeaseExtensions++
		}
	}
	r.prevRun = cur
}
