package main

/*
#include <stdint.h>
#include <stdlib.h>
#include "shockwave.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
)

// Statuses of shockwave.h.
const (
	stOK        = C.int(C.SHOCKWAVE_OK)
	stSuspend   = C.int(C.SHOCKWAVE_SUSPEND)
	stResume    = C.int(C.SHOCKWAVE_RESUME)
	stTimeout   = C.int(C.SHOCKWAVE_TIMEOUT)
	stEnded     = C.int(C.SHOCKWAVE_ENDED)
	stPreempted = C.int(C.SHOCKWAVE_PREEMPTED)
	stWait      = C.int(C.SHOCKWAVE_WAIT)

	errInvalid  = C.int(C.SHOCKWAVE_ERR_INVALID)
	errHandle   = C.int(C.SHOCKWAVE_ERR_HANDLE)
	errConnect  = C.int(C.SHOCKWAVE_ERR_CONNECT)
	errRefused  = C.int(C.SHOCKWAVE_ERR_REFUSED)
	errClosed   = C.int(C.SHOCKWAVE_ERR_CLOSED)
	errInternal = C.int(C.SHOCKWAVE_ERR_INTERNAL)
	errRankLost = C.int(C.SHOCKWAVE_ERR_RANK_LOST)
)

// finishTimeout bounds shockwave_finish's wait until the coordinator has
// the done event (sdk.Job.Finish).
const finishTimeout = 10 * time.Second

// failure is an error status with its message.
type failure struct {
	status C.int
	msg    string
}

func fail(status C.int, format string, args ...any) *failure {
	return &failure{status, fmt.Sprintf(format, args...)}
}

// sdkFailure classifies an error of the SDK.
func sdkFailure(err error) *failure {
	st := errInternal
	var perr *protocol.Error
	switch {
	case errors.Is(err, sdk.ErrRankLost):
		st = errRankLost
	case errors.Is(err, sdk.ErrClosed):
		st = errClosed
	case errors.As(err, &perr):
		st = errRefused
	case errors.Is(err, sdk.ErrRegister), errors.Is(err, sdk.ErrNotDelivered):
		st = errConnect
	}
	return &failure{st, err.Error()}
}

// call runs f on the open handle id with its lock held and records a
// failure as the handle's error. It turns a panic into
// SHOCKWAVE_ERR_INTERNAL: a panic must not unwind into C.
func call(id C.int64_t, name string, f func(h *handle) (C.int, *failure)) (st C.int) {
	h := lookup(int64(id))
	if h == nil {
		return errHandle // swgo_last_error explains
	}
	defer h.recoverInto(name, &st)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		h.setErr(fmt.Sprintf("shockwave: %s: job %s is closed", name, h.jobID()))
		return errClosed
	}
	st, f2 := f(h)
	if f2 != nil {
		h.setErr("shockwave: " + name + ": " + f2.msg)
		return f2.status
	}
	return st
}

// recoverInto turns a panic inside export name into errInternal with a
// message; it must be deferred directly (recover works only there).
func (h *handle) recoverInto(name string, st *C.int) {
	if r := recover(); r != nil {
		h.setErr(fmt.Sprintf("shockwave: %s: internal error: %v", name, r))
		*st = errInternal
	}
}

func (h *handle) jobID() string {
	if h.job == nil {
		return fmt.Sprintf("(handle %d)", h.id)
	}
	return h.job.ID()
}

//export swgo_open
func swgo_open(cfg *C.char, out *C.int64_t) (st C.int) {
	setOpenErr := func(status C.int, msg string) C.int {
		openErr.Lock()
		openErr.msg = "shockwave_open: " + msg
		openErr.Unlock()
		return status
	}
	defer func() {
		if r := recover(); r != nil {
			st = setOpenErr(errInternal, fmt.Sprintf("internal error: %v", r))
		}
	}()
	if cfg == nil || out == nil {
		return setOpenErr(errInvalid, "config and handle must not be NULL")
	}
	opts, keys, sampleEvery, err := parseConfig([]byte(C.GoString(cfg)))
	if err != nil {
		return setOpenErr(errInvalid, err.Error())
	}
	job, err := sdk.Register(context.Background(), opts...)
	if err != nil {
		f := sdkFailure(err)
		if f.status == errInternal {
			f = &failure{errInvalid, nameOption(err, keys)}
		}
		return setOpenErr(f.status, f.msg)
	}
	h := &handle{job: job, cb: newControl(job.BatchSize(), job.Rank(), job.WorldSize()), quit: make(chan struct{}), done: make(chan struct{}),
		lastSample: time.Now()}
	h.lastSteps = h.cb.steps()
	h.mirrorGateLocked()
	addHandle(h)
	go h.run(samplerPeriod(job, sampleEvery))
	*out = C.int64_t(h.id)
	return stOK
}

//export swgo_control_block
func swgo_control_block(id C.int64_t, out *unsafe.Pointer) C.int {
	return call(id, "shockwave_control_block", func(h *handle) (C.int, *failure) {
		if out == nil {
			return 0, fail(errInvalid, "block must not be NULL")
		}
		*out = h.cb.ptr()
		return stOK, nil
	})
}

//export swgo_boundary
func swgo_boundary(id C.int64_t) C.int {
	return call(id, "shockwave_boundary", func(h *handle) (C.int, *failure) {
		h.sampleLocked()
		if h.finished {
			return 0, fail(errClosed, "job %s finished", h.job.ID())
		}
		d := h.job.Boundary()
		h.mirrorGateLocked()
		h.parked = d != sdk.Continue
		switch d {
		case sdk.Continue:
			h.loopRan = true
			return stOK, nil
		case sdk.Stop:
			if err := h.job.RankErr(); err != nil {
				return 0, &failure{errRankLost, err.Error()}
			}
			if h.job.LeaseState() == sdk.Closed {
				return 0, fail(errClosed, "job %s is closed", h.job.ID())
			}
			h.setErr(fmt.Sprintf("shockwave: the coordinator ended job %s: %s", h.job.ID(), h.job.Reason()))
			return stEnded, nil
		}
		steps := h.cb.steps()
		if !h.loopRan && steps == h.pausedAt {
			return stWait, nil // nothing ran since the last pause: no hook
		}
		h.loopRan, h.pausedAt, h.suspended = false, steps, true
		if d == sdk.Preempt {
			return stPreempted, nil
		}
		return stSuspend, nil
	})
}

//export swgo_wait_run
func swgo_wait_run(id C.int64_t, timeoutMS C.int64_t) (st C.int) {
	h := lookup(int64(id))
	if h == nil {
		return errHandle
	}
	defer h.recoverInto("shockwave_wait_run", &st)
	h.mu.Lock()
	job, closed := h.job, h.closed
	h.mu.Unlock()
	if closed {
		h.setErr(fmt.Sprintf("shockwave: shockwave_wait_run: job %s is closed", h.jobID()))
		return errClosed
	}
	ctx := context.Background()
	if timeoutMS >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
		defer cancel()
	}
	_, err := job.WaitRun(ctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return stTimeout
	case errors.Is(err, sdk.ErrEnded):
		h.setErr("shockwave: " + err.Error())
		return stEnded
	case err != nil:
		f := sdkFailure(err)
		h.setErr("shockwave: shockwave_wait_run: " + f.msg)
		return f.status
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st = stOK
	if h.suspended {
		st, h.suspended = stResume, false
	}
	h.parked = false
	h.sampleLocked()
	h.mirrorGateLocked()
	h.loopRan, h.pausedAt = true, h.cb.steps()
	return st
}

//export swgo_epoch
func swgo_epoch(id C.int64_t) C.int {
	return call(id, "shockwave_epoch", func(h *handle) (C.int, *failure) {
		h.sampleLocked()
		h.job.EndEpoch()
		return stOK, nil
	})
}

//export swgo_set_batch_size
func swgo_set_batch_size(id C.int64_t, n C.int64_t) C.int {
	return call(id, "shockwave_set_batch_size", func(h *handle) (C.int, *failure) {
		if n < 1 || n > protocol.MaxBatchSize {
			return 0, fail(errInvalid, "batch size %d out of range [1, %d]", int64(n), protocol.MaxBatchSize)
		}
		h.sampleLocked()
		if err := h.job.SetBatchSize(int(n)); err != nil {
			return 0, &failure{errInvalid, err.Error()}
		}
		h.cb.setBatchSize(int(n))
		return stOK, nil
	})
}

//export swgo_text
func swgo_text(id C.int64_t, kind C.int, buf *C.char, capacity C.size_t, length *C.size_t) C.int {
	return call(id, "shockwave_text", func(h *handle) (C.int, *failure) {
		if length == nil {
			return 0, fail(errInvalid, "len must not be NULL")
		}
		var v any
		switch kind {
		case 0:
			l, ok := h.job.Lease()
			v = l
			if !ok {
				v = struct{}{}
			}
		case 1:
			h.sampleLocked()
			v = h.job.Checkpoint()
		case 2:
			l, ok := h.job.Grant()
			v = l
			if !ok {
				v = struct{}{}
			}
		default:
			return 0, fail(errInvalid, "unknown text kind %d", int(kind))
		}
		data, err := json.Marshal(v)
		if err != nil {
			return 0, &failure{errInternal, err.Error()}
		}
		writeText(string(data), buf, capacity, length)
		return stOK, nil
	})
}

//export swgo_finish
func swgo_finish(id C.int64_t) C.int {
	return call(id, "shockwave_finish", func(h *handle) (C.int, *failure) {
		h.sampleLocked()
		ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
		defer cancel()
		if err := h.job.Finish(ctx); err != nil {
			return 0, sdkFailure(err)
		}
		h.finished = true
		h.cb.setLease(leaseClosed)
		return stOK, nil
	})
}

//export swgo_close
func swgo_close(id C.int64_t) (st C.int) {
	h := lookup(int64(id))
	if h == nil {
		return errHandle
	}
	defer h.recoverInto("shockwave_close", &st)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return stOK
	}
	h.sampleLocked()
	h.closed = true
	h.mu.Unlock()
	close(h.quit)
	<-h.done
	err := h.job.Close()
	h.cb.setLease(leaseClosed)
	if err != nil {
		h.setErr("shockwave: shockwave_close: " + err.Error())
		return sdkFailure(err).status
	}
	return stOK
}

//export swgo_last_error
func swgo_last_error(id C.int64_t, buf *C.char, capacity C.size_t, length *C.size_t) C.int {
	var msg string
	if id == 0 {
		openErr.Lock()
		msg = openErr.msg
		openErr.Unlock()
	} else if h := lookup(int64(id)); h != nil {
		msg = h.err()
	} else {
		msg = fmt.Sprintf("shockwave: no job has handle %d (handles come from shockwave_open)", int64(id))
	}
	writeText(msg, buf, capacity, length)
	return stOK
}

// writeText copies s into the caller's buffer like snprintf.
func writeText(s string, buf *C.char, capacity C.size_t, length *C.size_t) {
	*length = C.size_t(len(s))
	if buf == nil || capacity == 0 {
		return
	}
	n := min(len(s), int(capacity)-1)
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
	copy(dst, s[:n])
	dst[n] = 0
}
