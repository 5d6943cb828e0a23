package coordinator

import (
	"errors"
	"fmt"
	"slices"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Lease lifecycle of a live service, on top of the round mechanism of
// core.go and tick.go (which the simulator uses alone):
//
//   - Enroll is Register that accepts a known job again: an SDK that
//     restarts registers with the same parameters and resumes the job with
//     its recorded progress; different parameters are a conflict.
//   - Deliver is Apply that also accepts events of jobs the policy does not
//     track: heartbeats of pending jobs, and the first word of a lost job
//     coming back, which makes it pending again.
//   - At every tick (expire), a job silent for Config.JobTimeoutSeconds is
//     marked lost: it leaves the policy, its GPUs go to others and it gets a
//     SUSPEND lease; and with Config.ExpireLeases, leases that expired
//     before the tick are void.

// Lost is the state of a job that went silent for the job timeout. It holds
// no GPUs and is not scheduled; it keeps its progress and becomes pending
// again when it sends an event or registers again.
const Lost JobState = "lost"

// ErrConflict rejects a registration of a known job id with different
// parameters.
var ErrConflict = errors.New("coordinator: job registered with different parameters")

// identity is what makes two registrations the same job: the parameters
// that define its work. Other fields (name, priority, throughput, submit
// time, schedule) keep the values of the first registration.
type identity struct {
	model, mode     string
	workers, batch  int
	dataset         int
	steps           int64
	isolatedSeconds float64
}

func identityOf(r *protocol.Register) identity {
	return identity{model: r.Model, mode: r.Mode, workers: r.Workers, batch: r.BatchSize,
		dataset: r.DatasetSize, steps: r.TotalSteps, isolatedSeconds: r.IsolatedSeconds}
}

// liveness is the Core's lifecycle bookkeeping.
type liveness struct {
	lastTick float64 // start of the most recent round
	ticked   bool
	lost     []Ended // since the previous tick
}

// Enroll registers a job, or resumes it when the id is known: a registration
// with the same defining parameters (model, mode, workers, batch size,
// dataset size, total steps, isolated seconds) is accepted again — it
// changes nothing for a pending or active job and makes a lost job pending
// again — and resumed is true. A different registration of a known id
// returns ErrConflict, one of an ended job ErrJobEnded. A rejected
// registration changes no state.
func (c *Core) Enroll(now float64, r *protocol.Register) (resumed bool, err error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	j, ok := c.jobs[r.Job]
	if !ok {
		return false, c.Register(now, r)
	}
	switch {
	case j.state != Active && j.state != Pending && j.state != Lost:
		return false, fmt.Errorf("%w: %s is %s", ErrJobEnded, r.Job, j.state)
	case j.managed && !j.adopted:
		return false, c.adopt(now, j, r)
	case j.ident != identityOf(r):
		return false, fmt.Errorf("%w: %s", ErrConflict, r.Job)
	}
	vis := visibleSet(r.Visible)
	if err := c.checkResident(r.Job, r.Workers, r.Node, vis); err != nil {
		return false, err
	}
	if err := c.advance(now); err != nil {
		return false, err
	}
	j.lastHeard = now
	if j.node != r.Node || !slices.Equal(j.visible, vis) {
		// The process restarted elsewhere: its grant, if any, is void.
		j.node, j.visible = r.Node, vis
		if j.state == Active && j.leaseRound == c.round-1 && j.leaseRound >= 0 && j.void == "" {
			j.void, j.workers, j.devices = "registered again on another node", nil, nil
		}
	}
	c.rejoin(j)
	return true, nil
}

// Deliver folds one job event into the job's state, like Apply, and also
// accepts events of pending and lost jobs: their progress, batch size and
// run time are recorded without telling the policy (it does not track
// them), a lost job becomes pending again and is re-admitted at the next
// tick, and done ends either. A rejected event changes no state.
func (c *Core) Deliver(now float64, e *protocol.Event) (*protocol.Lease, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	j, ok := c.jobs[e.Job]
	if !ok || (j.state != Pending && j.state != Lost) {
		return c.Apply(now, e)
	}
	if e.Seq <= j.lastSeq {
		return nil, fmt.Errorf("%w: job %s sent seq %d after %d", ErrOutOfOrder, e.Job, e.Seq, j.lastSeq)
	}
	if e.Seq-j.lastSeq > protocol.MaxSeqGap {
		return nil, fmt.Errorf("%w: job %s jumped from seq %d to %d (more than 2^32 ahead)", ErrOutOfOrder, e.Job, j.lastSeq, e.Seq)
	}
	if err := c.advance(now); err != nil {
		return nil, err
	}
	j.lastSeq, j.lastHeard = e.Seq, now
	if e.Type == protocol.EventDone {
		c.drop(j, Completed, "reported done")
		return nil, nil
	}
	c.setState(j, e)
	if e.Type == protocol.EventProgress && (e.Steps > 0 || e.Elapsed > 0) {
		j.view.RunTime += e.Elapsed
		j.failures = 0
	}
	c.rejoin(j)
	return nil, nil
}

// rejoin makes a lost job pending again; it keeps its admission time.
func (c *Core) rejoin(j *job) {
	if j.state != Lost {
		return
	}
	j.state, j.readmit = Pending, true
	c.pending = append(c.pending, j)
	c.unretire(j)
}

// drop ends a job the policy does not track (pending or lost).
func (c *Core) drop(j *job, s JobState, reason string) {
	if i := slices.Index(c.pending, j); i >= 0 {
		c.pending = slices.Delete(c.pending, i, i+1)
	}
	j.state, j.readmit, j.reason = s, false, reason
	j.forget()
	c.ended = append(c.ended, Ended{Job: j.view.ID, State: s, Time: c.now, Reason: reason})
	c.retire(j)
}

// expire runs at the start of a tick at time now. With ExpireLeases, when
// the previous round's leases expired before now, they are void: the jobs
// stopped by themselves, so nothing is extended, suspended or counted as a
// failure. Then every active job silent for JobTimeoutSeconds is marked
// lost; one that held a lease gets a SUSPEND lease, as its GPUs go to
// others. It returns those SUSPEND leases.
func (c *Core) expire(now float64) []protocol.Lease {
	c.leasesExpired(now)
	if c.cfg.JobTimeoutSeconds <= 0 {
		return nil
	}
	var leases []protocol.Lease
	for _, j := range slices.Clone(c.active) {
		silent := now - j.lastHeard
		if silent < c.cfg.JobTimeoutSeconds || j.managed || !c.lostAt(j, now) {
			continue
		}
		reason := fmt.Sprintf("no events for %.1fs", silent)
		if j.leaseRound == c.round-1 && j.leaseRound >= 0 {
			l := c.lease(j, protocol.Suspend)
			l.Reason = "lost: " + reason
			leases = append(leases, l)
		}
		j.state = Lost
		j.leaseRound, j.workers, j.devices, j.leaseSteps, j.leaseElapsed = -1, nil, nil, 0, 0
		c.active = slices.DeleteFunc(c.active, func(a *job) bool { return a == j })
		c.remove(j.view.ID)
		c.life.lost = append(c.life.lost, Ended{Job: j.view.ID, State: Lost, Time: now, Reason: reason})
		c.retire(j)
	}
	return leases
}
