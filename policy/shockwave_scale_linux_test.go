package policy

import "syscall"

// threadCPU is the CPU time (user + system) of the calling OS thread, in
// nanoseconds (getrusage RUSAGE_THREAD); the caller locks its goroutine to
// the thread.
func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
