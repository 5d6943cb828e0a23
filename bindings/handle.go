package main

/*
#include <stdlib.h>
#include "shockwave.h"
*/
import "C"

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/shockwave-sched/shockwave/sdk"
)

// Control-block constants of shockwave.h, as Go values.
const (
	leaseRun     = int32(C.SHOCKWAVE_LEASE_RUN)
	leasePending = int32(C.SHOCKWAVE_LEASE_PENDING)
	leaseSuspend = int32(C.SHOCKWAVE_LEASE_SUSPEND)
	leaseExit    = int32(C.SHOCKWAVE_LEASE_EXIT)
	leaseClosed  = int32(C.SHOCKWAVE_LEASE_CLOSED)
)

// control gives atomic access to a control block in C memory.
type control struct{ p *C.shockwave_control }

// newControl allocates a zeroed control block. It is never freed (see
// shockwave.h): a thread may still read it after the job closed.
func newControl(batchSize, rank, world int) control {
	p := (*C.shockwave_control)(C.calloc(1, C.size_t(unsafe.Sizeof(C.shockwave_control{}))))
	if p == nil {
		panic("shockwave: out of memory allocating a control block")
	}
	c := control{p}
	p.magic = C.SHOCKWAVE_CONTROL_MAGIC
	p.version = 2
	p.rank, p.world = C.int32_t(rank), C.int32_t(world)
	atomic.StoreUint64(c.u64(&p.gate), math.MaxUint64)
	atomic.StoreInt32(c.i32(&p.batch_size), int32(batchSize))
	c.setLease(leasePending)
	return c
}

func (control) i32(p *C.int32_t) *int32   { return (*int32)(unsafe.Pointer(p)) }
func (control) u64(p *C.uint64_t) *uint64 { return (*uint64)(unsafe.Pointer(p)) }

func (c control) lease() int32        { return atomic.LoadInt32(c.i32(&c.p.lease)) }
func (c control) steps() uint64       { return atomic.LoadUint64(c.u64(&c.p.steps)) }
func (c control) active() bool        { return atomic.LoadInt32(c.i32(&c.p.active)) != 0 }
func (c control) setBatchSize(n int)  { atomic.StoreInt32(c.i32(&c.p.batch_size), int32(n)) }
func (c control) ptr() unsafe.Pointer { return unsafe.Pointer(c.p) }
func (c control) setGate(v uint64)    { atomic.StoreUint64(c.u64(&c.p.gate), v) }

// setLease publishes a lease state: the sequence number first, so that a
// reader that sees the new state also sees the new sequence number.
func (c control) setLease(v int32) {
	atomic.AddUint64(c.u64(&c.p.lease_seq), 1)
	atomic.StoreInt32(c.i32(&c.p.lease), v)
}

// handle is one open job. Calls on it are serialised by mu, except
// waitRun, which blocks without it.
type handle struct {
	id  int64
	job *sdk.Job
	cb  control

	quit chan struct{} // stops the sampler
	done chan struct{} // closed when the sampler returned

	errMu   sync.Mutex
	lastErr string

	mu         sync.Mutex
	lastSteps  uint64    // cb steps already recorded with the SDK
	lastSample time.Time // when they were
	wasRunning bool      // the loop was active and not parked at the last sample
	parked     bool      // the boundary told the loop to wait (or it has not been told to train yet)
	pausedAt   uint64    // cb steps at the last pause (open, suspension, resumption)
	loopRan    bool      // the loop was told to train since the last pause
	suspended  bool      // SUSPEND or PREEMPTED was returned; RESUME is due
	finished   bool      // shockwave_finish succeeded
	closed     bool
}

func (h *handle) setErr(msg string) {
	h.errMu.Lock()
	h.lastErr = msg
	h.errMu.Unlock()
}

func (h *handle) err() string {
	h.errMu.Lock()
	defer h.errMu.Unlock()
	return h.lastErr
}

// table holds every handle opened in the process. Closed handles stay as
// tombstones (without their job) so that shockwave_last_error still
// explains a failed close and later calls get SHOCKWAVE_ERR_CLOSED.
var table = struct {
	sync.RWMutex
	m    map[int64]*handle
	next int64
}{m: map[int64]*handle{}}

func addHandle(h *handle) {
	table.Lock()
	table.next++
	h.id = table.next
	table.m[h.id] = h
	table.Unlock()
}

func lookup(id int64) *handle {
	table.RLock()
	defer table.RUnlock()
	return table.m[id]
}

// openErr is the error of the most recent failed open (handle 0).
var openErr struct {
	sync.Mutex
	msg string
}

// samplerPeriod is how often the counters are fed to the SDK: a few times
// per SDK sample, so that progress events see fresh counts.
func samplerPeriod(j *sdk.Job, sampleInterval time.Duration) time.Duration {
	d := j.RoundLength() / 8
	if sampleInterval > 0 {
		d = sampleInterval / 2
	}
	return min(max(d, 5*time.Millisecond), 250*time.Millisecond)
}

// run is the handle's goroutine: it mirrors every lease change into the
// control block at once and samples the step counter periodically.
func (h *handle) run(period time.Duration) {
	defer close(h.done)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		changed := h.job.Changed()
		h.mirror()
		select {
		case <-h.quit:
			return
		case <-changed:
		case <-t.C:
			h.mu.Lock()
			h.sampleLocked()
			h.mu.Unlock()
		}
	}
}

// mirror writes the SDK's lease state into the control block.
func (h *handle) mirror() {
	var v int32
	switch h.job.LeaseState() {
	case sdk.Running:
		v = leaseRun
	case sdk.Waiting:
		v = leaseSuspend
		if _, ok := h.job.Lease(); !ok {
			v = leasePending
		}
	case sdk.Ended:
		v = leaseExit
		h.mu.Lock()
		if h.finished {
			v = leaseClosed
		}
		h.mu.Unlock()
	default:
		v = leaseClosed
	}
	if h.cb.lease() != v {
		h.cb.setLease(v)
	}
	h.mu.Lock()
	h.mirrorGateLocked()
	h.mu.Unlock()
}

// mirrorGateLocked writes the SDK's next rank-agreement step into the
// control block, in the block's own step count (steps since open): the
// SDK counts from the job's start, and a rank other than 0 adopts rank
// 0's count when it first joins.
func (h *handle) mirrorGateLocked() {
	g := h.job.Gate()
	if g == math.MaxInt64 {
		h.cb.setGate(math.MaxUint64)
		return
	}
	offset := h.job.StepsDone() - int64(h.lastSteps) // steps the SDK counted before the block's first
	h.cb.setGate(uint64(max(g-offset, 0)))
}

// sampleLocked records the steps counted since the last sample with the
// SDK. Time counts only while the loop was active and not parked both at
// the last sample and now, so that waiting and idle spells do not lower
// the measured throughput. Parked is the boundary's word, not the
// lease's: the steps a multi-process job runs between a SUSPEND and the
// step where its ranks agreed to stop are training, and counted without
// their time they would raise the measured rate, and with it rank 0's
// next lookahead, at every suspension.
func (h *handle) sampleLocked() {
	now := time.Now()
	steps := h.cb.steps()
	running := h.cb.active() && !h.parked
	var elapsed time.Duration
	if running && h.wasRunning {
		elapsed = now.Sub(h.lastSample)
	}
	if n := int64(steps - h.lastSteps); n > 0 || elapsed > 0 {
		h.job.RecordSteps(max(n, 0), elapsed)
	}
	h.lastSteps, h.lastSample, h.wasRunning = steps, now, running
}
