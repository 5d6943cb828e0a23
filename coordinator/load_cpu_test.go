package coordinator

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CPU accounting of the load test beyond its own process: the job
// processes' and the whole machine's, to show how much of the machine the
// measured latencies had (the jobs run on the same cores as the
// coordinator here).

// procCPU is a process's user+system CPU time, from /proc/<pid>/stat.
func procCPU(t *testing.T, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime and stime are fields 14 and 15 of stat
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// childrenCPU sums the CPU time of the job processes.
func childrenCPU(t *testing.T, children []*exec.Cmd) time.Duration {
	var sum time.Duration
	for _, c := range children {
		sum += procCPU(t, c.Process.Pid)
	}
	return sum
}

// machineTimes are the machine's CPU times in USER_HZ ticks, from the
// first line of /proc/stat.
type machineTimes struct{ busy, idle, steal int64 }

func machineCPU(t *testing.T) machineTimes {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var m machineTimes
	for i := 1; i < len(f) && i <= 8; i++ {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		switch i {
		case 4, 5: // idle, iowait
			m.idle += v
		case 8:
			m.steal += v
		default:
			m.busy += v
		}
	}
	return m
}

// machineShare describes the machine's use between two readings.
type machineShare struct {
	busy, steal float64 // shares of all cores' time
	cores       int
}

func (m machineTimes) since(before machineTimes) machineShare {
	busy, idle, steal := m.busy-before.busy, m.idle-before.idle, m.steal-before.steal
	total := float64(busy + idle + steal)
	if total <= 0 {
		return machineShare{cores: runtime.NumCPU()}
	}
	return machineShare{busy: float64(busy) / total, steal: float64(steal) / total, cores: runtime.NumCPU()}
}

func (s machineShare) String() string {
	return fmt.Sprintf("%.1f%% of its %d cores busy, %.1f%% stolen by the host", 100*s.busy, s.cores, 100*s.steal)
}

// memoryBreakdown splits this process's memory as the Go runtime sees
// it: the heap in use, goroutine stacks (the embedded server runs two
// goroutines a connection), and what the runtime holds without using.
func memoryBreakdown() string {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return fmt.Sprintf("heap in use %d MiB (goal %d MiB), stacks %d MiB, %d goroutines, held by the runtime and idle %d MiB, released %d MiB",
		m.HeapInuse>>20, m.NextGC>>20, m.StackInuse>>20, runtime.NumGoroutine(), (m.HeapIdle-m.HeapReleased)>>20, m.HeapReleased>>20)
}
