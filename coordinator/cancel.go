package coordinator

import "errors"

// ErrNoReason is returned by Cancel without a reason.
var ErrNoReason = errors.New("coordinator: cancel needs a reason")

// Cancel ends a pending, active or lost job at its owner's request: the
// policy forgets it (Remove, so a truncated run teaches no forecaster), its
// GPUs are free at the next tick, and later events of it are refused with
// ErrJobEnded. It is the simulator's entry point for job cancellations (the
// service ends submitted jobs through EndJob, which also returns the EXIT
// lease to publish); an unknown or ended job is an error and changes nothing.
func (c *Core) Cancel(now float64, id, reason string) error {
	if reason == "" {
		return ErrNoReason
	}
	_, err := c.EndJob(now, id, Cancelled, reason)
	return err
}
