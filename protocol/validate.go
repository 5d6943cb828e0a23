package protocol

import "fmt"

// Validate checks every field of a registration.
func (r *Register) Validate() error {
	const m = "register"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	if err := ValidateJobID(m, r.Job); err != nil {
		return err
	}
	if r.Model == "" {
		return fieldErr(m, "model", "empty model family")
	}
	if len(r.Model) > MaxModelNameLen || len(r.Name) > MaxModelNameLen {
		return fieldErr(m, "model", "longer than %d bytes", MaxModelNameLen)
	}
	switch r.Mode {
	case "", "static", "gns", "accordion":
	default:
		return fieldErr(m, "mode", "unknown mode %q (want static, gns or accordion)", r.Mode)
	}
	if r.Workers < 1 || r.Workers > MaxWorkers {
		return fieldErr(m, "workers", "%d out of range [1, %d]", r.Workers, MaxWorkers)
	}
	if r.Node != "" {
		if err := ValidateNodeName(m, "node", r.Node); err != nil {
			return err
		}
	} else if len(r.Visible) > 0 {
		return fieldErr(m, "visible", "visible devices without a node")
	}
	for i, x := range r.Visible {
		if x < 0 || x >= MaxWorkers {
			return fieldErr(m, fmt.Sprintf("visible[%d]", i), "device index %d out of range [0, %d)", x, MaxWorkers)
		}
	}
	if r.BatchSize < 1 || r.BatchSize > MaxBatchSize {
		return fieldErr(m, "batch_size", "%d out of range [1, %d]", r.BatchSize, MaxBatchSize)
	}
	if r.DatasetSize < 1 || r.DatasetSize > MaxBatchSize*MaxEpochs {
		return fieldErr(m, "dataset_size", "%d must be positive", r.DatasetSize)
	}
	if r.TotalSteps < 1 || r.TotalSteps > MaxSteps {
		return fieldErr(m, "total_steps", "%d out of range [1, %d]", r.TotalSteps, MaxSteps)
	}
	ipe := (int64(r.DatasetSize) + int64(r.BatchSize) - 1) / int64(r.BatchSize)
	if e := (r.TotalSteps + ipe - 1) / ipe; e > MaxJobEpochs {
		return fieldErr(m, "total_steps", "%d steps of %d per epoch make %d epochs, more than %d", r.TotalSteps, ipe, e, MaxJobEpochs)
	}
	if err := checkFinite(m, "priority", r.Priority, 0, 1e6); err != nil {
		return err
	}
	if err := checkFinite(m, "throughput", r.Throughput, 0, MaxThroughput); err != nil {
		return err
	}
	if err := checkFinite(m, "submit_time", r.SubmitTime, 0, MaxSeconds); err != nil {
		return err
	}
	if err := checkFinite(m, "isolated_seconds", r.IsolatedSeconds, 0, MaxSeconds); err != nil {
		return err
	}
	if r.Schedule != nil {
		if err := r.Schedule.validate(m); err != nil {
			return err
		}
	}
	return nil
}

func (s *Schedule) validate(m string) error {
	n := len(s.BatchSizes)
	if n == 0 || n > MaxScheduleLen {
		return fieldErr(m, "schedule.batch_sizes", "length %d out of range [1, %d]", n, MaxScheduleLen)
	}
	for i, b := range s.BatchSizes {
		if b < 1 || b > MaxBatchSize {
			return fieldErr(m, fmt.Sprintf("schedule.batch_sizes[%d]", i), "%d out of range [1, %d]", b, MaxBatchSize)
		}
	}
	if s.EpochSeconds != nil && len(s.EpochSeconds) != n {
		return fieldErr(m, "schedule.epoch_seconds", "length %d, want %d (one per epoch)", len(s.EpochSeconds), n)
	}
	for i, d := range s.EpochSeconds {
		if err := checkFinite(m, fmt.Sprintf("schedule.epoch_seconds[%d]", i), d, 0, MaxSeconds); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks every field of an event.
func (e *Event) Validate() error {
	var m string
	switch e.Type {
	case "":
		m = "event"
	case EventProgress:
		m = "progress event" // constants: no concatenation per event
	case EventBatchSize:
		m = "batch_size event"
	case EventDone:
		m = "done event"
	default:
		m = string(e.Type) + " event"
	}
	if err := checkVersion(m, e.V); err != nil {
		return err
	}
	if err := ValidateJobID(m, e.Job); err != nil {
		return err
	}
	if e.Seq == 0 || e.Seq > MaxSeq {
		return fieldErr(m, "seq", "%d out of range [1, 2^53]", e.Seq)
	}
	switch e.Type {
	case EventProgress, EventBatchSize:
	case EventDone:
		return nil
	default:
		return fieldErr(m, "type", "unknown event type %q (want progress, batch_size or done)", e.Type)
	}
	if e.Steps < 0 || e.Steps > MaxSteps {
		return fieldErr(m, "steps", "%d out of range [0, %d]", e.Steps, MaxSteps)
	}
	if err := checkFinite(m, "elapsed", e.Elapsed, 0, MaxSeconds); err != nil {
		return err
	}
	if e.StepsDone < 0 || e.StepsDone > MaxSteps {
		return fieldErr(m, "steps_done", "%d out of range [0, %d]", e.StepsDone, MaxSteps)
	}
	if e.TotalSteps < 1 || e.TotalSteps > MaxSteps {
		return fieldErr(m, "total_steps", "%d out of range [1, %d]", e.TotalSteps, MaxSteps)
	}
	if e.Epoch < 0 || e.Epoch > MaxEpochs {
		return fieldErr(m, "epoch", "%d out of range [0, %d]", e.Epoch, MaxEpochs)
	}
	if e.BatchSize < 1 || e.BatchSize > MaxBatchSize {
		return fieldErr(m, "batch_size", "%d out of range [1, %d]", e.BatchSize, MaxBatchSize)
	}
	return checkFinite(m, "throughput", e.Throughput, 0, MaxThroughput)
}

// Validate checks a batch and every event in it.
func (b *Batch) Validate() error {
	if err := checkVersion("batch", b.V); err != nil {
		return err
	}
	if err := ValidateJobID("batch", b.Job); err != nil {
		return err
	}
	if len(b.Events) == 0 {
		return fieldErr("batch", "events", "empty batch")
	}
	for i := range b.Events {
		if b.Events[i].Job != b.Job {
			return fieldErr("batch", fmt.Sprintf("events[%d].job", i), "%q in a batch of job %q", b.Events[i].Job, b.Job)
		}
		if err := b.Events[i].Validate(); err != nil {
			return fmt.Errorf("events[%d]: %w", i, err)
		}
	}
	return nil
}

// Validate checks a lease; the SDK uses it to drop malformed leases.
func (l *Lease) Validate() error {
	const m = "lease"
	if err := checkVersion(m, l.V); err != nil {
		return err
	}
	if err := ValidateJobID(m, l.Job); err != nil {
		return err
	}
	if l.Round < 0 {
		return fieldErr(m, "round", "%d is negative", l.Round)
	}
	switch l.Action {
	case Run:
		if len(l.Workers) == 0 {
			return fieldErr(m, "workers", "a RUN lease grants no workers")
		}
	case Suspend, Exit:
	default:
		return fieldErr(m, "action", "unknown action %q (want RUN, SUSPEND or EXIT)", l.Action)
	}
	for i, w := range l.Workers {
		if w < 0 {
			return fieldErr(m, fmt.Sprintf("workers[%d]", i), "negative GPU id %d", w)
		}
	}
	n := 0
	for i, d := range l.Devices {
		f := fmt.Sprintf("devices[%d]", i)
		if err := ValidateNodeName(m, f+".node", d.Node); err != nil {
			return err
		}
		if len(d.Devices) == 0 {
			return fieldErr(m, f+".devices", "no devices on node %q", d.Node)
		}
		for k, x := range d.Devices {
			if x < 0 || x >= MaxWorkers {
				return fieldErr(m, fmt.Sprintf("%s.devices[%d]", f, k), "device index %d out of range [0, %d)", x, MaxWorkers)
			}
		}
		n += len(d.Devices)
	}
	if len(l.Devices) > 0 && n != len(l.Workers) {
		return fieldErr(m, "devices", "%d devices for %d workers", n, len(l.Workers))
	}
	if err := checkFinite(m, "start", l.Start, 0, MaxSeconds); err != nil {
		return err
	}
	if err := checkFinite(m, "expiry", l.Expiry, l.Start, MaxSeconds); err != nil {
		return err
	}
	return nil
}
