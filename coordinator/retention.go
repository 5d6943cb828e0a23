package coordinator

import (
	"cmp"
	"fmt"
	"slices"
)

// Retention of ended jobs. An ended job keeps a row in the job table (its
// state, reason and totals, for status and for a late registration's
// "ended" answer), about 1.2 KB of memory and a row of every snapshot, and
// its event budget and, if it was submitted, its submission stay in the
// fold. A coordinator running 10,000-job clusters ends tens of thousands
// of jobs a day, so without a bound its memory and snapshots grow by tens
// of megabytes a day for as long as it runs. Config.KeepEnded bounds the
// ended and lost jobs kept: past it, the job that ended (or was lost)
// first is forgotten, as if it had never registered (a registration of its
// id starts a new job; its events are refused as those of an unknown job).
//
// The order is the order of leaving, numbered by the Core (retireSeq) and
// saved with each job (job.retiredAt), so a Core restored from a snapshot
// forgets the jobs the uninterrupted one does. A lost job that comes back
// leaves the order, and enters it again at the end if it ends or is lost
// again.

// DefaultKeepEnded is the service's Config.KeepEnded in a new log: about
// 60 MB of job rows at most, a day or two of a 10,000-job cluster's ended
// jobs and months of a small one's.
const DefaultKeepEnded = 50_000

// retention is the Core's bookkeeping of the ended and lost jobs.
type retention struct {
	retireSeq uint64         // the last job.retiredAt handed out
	retired   []retiredEntry // in the order they left, from head; stale entries are skipped
	head      int
	nRetired  int // jobs with retiredAt > 0
	// onForget is called with the id of each job forgotten (the fold drops
	// what it keeps of the job).
	onForget func(id string)
}

// retiredEntry is a job as it left; stale once the job's retiredAt moved.
type retiredEntry struct {
	j  *job
	at uint64
}

// retire numbers a job that ended or was lost and forgets the earliest
// ones past Config.KeepEnded.
func (c *Core) retire(j *job) {
	if j.retiredAt == 0 {
		c.nRetired++
	}
	c.retireSeq++
	j.retiredAt = c.retireSeq
	c.retired = append(c.retired, retiredEntry{j, j.retiredAt})
	c.trimRetired()
}

// unretire takes a lost job that came back out of the order.
func (c *Core) unretire(j *job) {
	if j.retiredAt != 0 {
		j.retiredAt = 0
		c.nRetired--
	}
}

// trimRetired forgets the earliest retired jobs past Config.KeepEnded.
func (c *Core) trimRetired() {
	keep := c.cfg.KeepEnded
	for keep > 0 && c.nRetired > keep && c.head < len(c.retired) {
		e := c.retired[c.head]
		c.retired[c.head] = retiredEntry{}
		c.head++
		if e.j.retiredAt != e.at {
			continue // came back, or left again later
		}
		delete(c.jobs, e.j.view.ID)
		c.nRetired--
		if c.onForget != nil {
			c.onForget(e.j.view.ID)
		}
	}
	if c.head > 64 && c.head > len(c.retired)/2 { // drop the consumed prefix
		c.retired = slices.Delete(c.retired, 0, c.head)
		c.head = 0
	}
	if len(c.retired) > 4*max(c.nRetired, 64) { // mostly stale: rebuild
		c.rebuildRetired()
	}
}

// rebuildRetired orders the retired jobs by retiredAt: after a load, and
// when most entries went stale (lost jobs coming back and leaving again).
func (c *Core) rebuildRetired() {
	c.retired, c.head, c.nRetired = c.retired[:0], 0, 0
	for _, j := range c.jobs {
		if j.retiredAt != 0 {
			c.retired = append(c.retired, retiredEntry{j, j.retiredAt})
			c.nRetired++
		}
	}
	slices.SortFunc(c.retired, func(a, b retiredEntry) int { return cmp.Compare(a.at, b.at) })
}

// loadRetention checks and indexes the retention order of a loaded state.
// A state from before it (version < 4) numbers its ended and lost jobs in
// id order, the order they are saved in.
func (c *Core) loadRetention(version int, ids []string) error {
	if version < 4 {
		c.retireSeq = 0
		for _, id := range ids {
			if j := c.jobs[id]; retires(j.state) {
				c.retireSeq++
				j.retiredAt = c.retireSeq
			}
		}
	}
	seen := make(map[uint64]string)
	for _, id := range ids {
		j := c.jobs[id]
		switch {
		case retires(j.state) != (j.retiredAt != 0):
			return fmt.Errorf("coordinator: core state: job %s is %s with retirement %d", id, j.state, j.retiredAt)
		case j.retiredAt > c.retireSeq:
			return fmt.Errorf("coordinator: core state: job %s retired at %d, after the last retirement %d", id, j.retiredAt, c.retireSeq)
		case j.retiredAt != 0 && seen[j.retiredAt] != "":
			return fmt.Errorf("coordinator: core state: jobs %s and %s retired at %d", seen[j.retiredAt], id, j.retiredAt)
		}
		if j.retiredAt != 0 {
			seen[j.retiredAt] = id
		}
	}
	c.rebuildRetired()
	return nil
}

// retires says whether a job in state s is in the retention order.
func retires(s JobState) bool {
	switch s {
	case Completed, Failed, Expired, Cancelled, Lost:
		return true
	}
	return false
}
