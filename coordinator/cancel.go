package coordinator

import (
	"errors"
	"fmt"
)

// Cancelled is the state of a job its owner withdrew before it finished.
const Cancelled JobState = "cancelled"

// ErrNoReason is returned by Cancel without a reason.
var ErrNoReason = errors.New("coordinator: cancel needs a reason")

// Cancel ends a pending, active or lost job at its owner's request: the
// policy forgets it (Remove, so a truncated run teaches no forecaster), its
// GPUs are free at the next tick, and later events of it are refused with
// ErrJobEnded. It is the driver's entry point (the simulator's job
// cancellations); an unknown or ended job is an error and changes nothing.
func (c *Core) Cancel(now float64, id, reason string) error {
	if reason == "" {
		return ErrNoReason
	}
	j, ok := c.jobs[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownJob, id)
	}
	switch j.state {
	case Active, Pending, Lost:
	default:
		return fmt.Errorf("%w: %s is %s", ErrJobEnded, id, j.state)
	}
	if err := c.advance(now); err != nil {
		return err
	}
	if j.state == Active {
		c.end(j, Cancelled, reason)
	} else {
		c.drop(j, Cancelled, reason)
	}
	return nil
}
