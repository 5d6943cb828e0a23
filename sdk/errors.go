package sdk

import (
	"errors"
	"fmt"
)

// Errors a training loop may see. Each is wrapped with the job id and the
// cause (the lease's reason, the coordinator's error reply, the network
// error), so errors.Is tells them apart and the message explains them.
var (
	// ErrPreempted ends the Steps loop in EXIT mode at a suspension, after
	// OnSuspend: the process should exit (status 0 or a launcher-specific
	// code) and be restarted later; it resumes from its checkpoint.
	ErrPreempted = errors.New("sdk: preempted: the job lost its GPUs; exit and restart from the checkpoint")
	// ErrEnded means the coordinator ended the job (an EXIT lease: too many
	// leases without progress, or the run-time limit). Stop for good.
	ErrEnded = errors.New("sdk: the coordinator ended the job")
	// ErrClosed is returned by calls on a job after Close.
	ErrClosed = errors.New("sdk: job closed")
	// ErrRegister wraps every failure of Register to be accepted.
	ErrRegister = errors.New("sdk: registration failed")
	// ErrNotDelivered means Finish or Close could not deliver the buffered
	// events (the coordinator stayed unreachable until the deadline).
	ErrNotDelivered = errors.New("sdk: events not delivered")
)

// jobErr wraps err with the job id and a cause.
func (j *Job) jobErr(err error, format string, args ...any) error {
	return fmt.Errorf("sdk: job %s: %s: %w", j.id, fmt.Sprintf(format, args...), err)
}
