package policy

import (
	"math"

	"github.com/shockwave-sched/shockwave/internal/wire"
)

// MarshalState writes the entry counter and every job's queue, entry,
// granted time, running flag and last accounting time.
func (t *Tiresias) MarshalState() []byte {
	var e wire.Encoder
	header(&e, t.Name())
	e.I64(t.next)
	ids := sortedIDs(t.jobs)
	e.Len(len(ids))
	for _, id := range ids {
		j := t.jobs[id]
		e.Str(id)
		e.Int(j.queue)
		e.I64(j.entry)
		e.F64(j.executed)
		e.Bool(j.running)
		e.F64(j.lastCheck)
	}
	return e.Bytes()
}

// UnmarshalState restores a state written by MarshalState into a fresh
// policy with the same configuration. It refuses a queue the configuration
// does not have, an entry at or past the counter, two jobs with one entry,
// and a negative or non-finite time.
func (t *Tiresias) UnmarshalState(b []byte) error {
	d := wire.NewDecoder(b)
	checkHeader(d, t.Name())
	next := d.I64()
	n := d.Len(41)
	jobs := make(map[string]*tiresiasJob, n)
	entries := make(map[int64]string, n)
	for range n {
		id := d.Str()
		j := &tiresiasJob{queue: d.IntIn(0, len(t.cfg.Thresholds)), entry: d.I64(), executed: d.F64(), running: d.Bool(), lastCheck: d.F64()}
		if d.Err() != nil {
			break
		}
		switch {
		case jobs[id] != nil:
			d.Failf("policy: tiresias state: job %s twice", id)
		case j.entry < 0 || j.entry >= next:
			d.Failf("policy: tiresias state: job %s entered its queue at %d, outside [0, %d)", id, j.entry, next)
		case entries[j.entry] != "":
			d.Failf("policy: tiresias state: jobs %s and %s share queue entry %d", entries[j.entry], id, j.entry)
		case !(j.executed >= 0) || math.IsInf(j.executed, 0) || math.IsNaN(j.lastCheck) || math.IsInf(j.lastCheck, 0):
			d.Failf("policy: tiresias state: job %s has granted time %v, last accounted at %v", id, j.executed, j.lastCheck)
		}
		jobs[id], entries[j.entry] = j, id
	}
	if err := d.End(); err != nil {
		return err
	}
	t.jobs, t.next = jobs, next
	return nil
}
