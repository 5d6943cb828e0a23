// Command bindings is libshockwave.so: the Go SDK (package sdk) as a C
// library for training loops in other languages, Python above all
// (bindings/python loads it through ctypes). Build it with
//
//	make lib
//
// or, from the repository root,
//
//	go build -buildmode=c-shared -o bindings/libshockwave.so ./bindings
//
// The C interface is bindings/shockwave.h (hand-written and documented; the
// header that -buildmode=c-shared generates next to the library lists the
// internal swgo_* exports and is not part of the interface).
//
// # Design
//
// A ctypes call into Go costs microseconds when calls are spaced out as in
// a training loop, so the per-step path never crosses into Go.
// Each job has a control block in C memory
// (shockwave_control): the library mirrors the SDK's lease state into it
// whenever the lease changes, and the training loop bumps a step counter in
// it. A goroutine per job samples that counter and feeds it to the SDK
// (sdk.Job.RecordSteps), timing the intervals in which the loop was active
// under a RUN lease; the SDK turns the counters into progress events. The
// loop calls into the library only when the mirrored lease is not RUN, at
// an epoch end, on a batch-size change, and to finish or close.
//
// Jobs are opaque int64 handles in a table, each with its own lock; every
// function returns a status and keeps the error message per handle
// (shockwave_last_error). The library never calls back into its caller:
// shockwave_boundary returns SHOCKWAVE_SUSPEND and shockwave_wait_run
// returns SHOCKWAVE_RESUME when the caller should run its hooks.
//
// The public entry points are C functions (shockwave.c) that refuse to run
// in a process forked after the library loaded — before entering Go, whose
// runtime does not survive fork() — and otherwise forward to the Go exports
// (exports.go).
package main

// main is required by -buildmode=c-shared and never runs.
func main() {}
