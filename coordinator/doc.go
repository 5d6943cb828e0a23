// Package coordinator holds the scheduler's brain and the service around it.
//
// Core is a deterministic state machine in the shape of etcd's raft RawNode:
// typed inputs (registrations, job events, round ticks) go in, leases and an
// explained per-round plan come out. It does no I/O, reads no clock (every
// input carries the time, in seconds on the coordinator's clock) and takes no
// locks: one goroutine owns it. The simulator drives Core on a virtual clock
// with exactly the events a job's SDK sends; the service drives it from NATS.
//
// A round (spec §3.3, DESIGN.md "Data flow"): events since the previous tick
// update each job's progress, batch size and throughput and are passed to the
// policy; at the tick, leases that produced no progress count as failures,
// registrations are admitted, the policy allocates, gangs are placed on GPU
// ids (spec §3.4), and leases are issued: RUN (an extension when the job ran
// in the previous round too), SUSPEND for jobs that lost their GPUs, EXIT for
// jobs the coordinator ended.
package coordinator
