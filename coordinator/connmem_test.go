package coordinator

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestLoad_MemoryPerJobConnection measures what one job's connection to
// the embedded server costs the coordinator's process — heap (the
// server's client, its permissions, its lease subscription) and goroutine
// stacks — over SHOCKWAVE_CONNMEM connections opened by a child process
// (docs/scale.md).
func TestLoad_MemoryPerJobConnection(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SHOCKWAVE_CONNMEM"))
	if url := os.Getenv("SHOCKWAVE_CONNMEM_CHILD"); url != "" {
		exitWithParent()
		connMemChild(t, url, n)
		return
	}
	if n <= 0 {
		t.Skip("set SHOCKWAVE_CONNMEM=N to measure N job connections")
	}
	emb, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Shutdown()
	before := heapAndStacks()
	c := exec.Command(os.Args[0], "-test.run=^TestLoad_MemoryPerJobConnection$", "-test.timeout=0")
	c.Env = append(os.Environ(), "SHOCKWAVE_CONNMEM_CHILD="+emb.ClientURL())
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	holdStdin(t, c)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Process.Kill()
		_ = c.Wait()
	}()
	eventually(t, 2*time.Minute, "every connection subscribed", func() bool {
		return emb.Server.NumClients() >= n && emb.Server.NumSubscriptions() >= uint32(n)
	})
	time.Sleep(time.Second) // the last connections settle
	after := heapAndStacks()
	heap, stacks := float64(after[0]-before[0])/float64(n), float64(after[1]-before[1])/float64(n)
	t.Logf("%d job connections: the server holds %.1f KB of heap and %.1f KB of goroutine stacks for each", n, heap/1024, stacks/1024)
}

// connMemChild opens n job connections, each subscribed to its lease
// subject, and keeps them until its parent goes away.
func connMemChild(t *testing.T, url string, n int) {
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	for i := range n {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Subscribe(subj.Lease(fmt.Sprintf("job-%05d", i)), func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	select {}
}

func heapAndStacks() [2]uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return [2]uint64{m.HeapInuse, m.StackInuse}
}

// BenchmarkPublish_ARoundOf2000Leases sends one round's leases — 2,000,
// one per job, about the RUN leases of a 10,000-job round — from the
// publisher's connections to 2,000 job connections of a child process,
// spread by job id as the publisher spreads them, each connection flushed
// at the end; conns=1 is one connection for all. It reports the round's
// wall time (ns/op) and the CPU this process (the server and the
// publisher) spent on it.
func BenchmarkPublish_ARoundOf2000Leases(b *testing.B) {
	const jobs = 2000
	emb, err := StartEmbedded(EmbeddedConfig{DataDir: b.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		b.Fatal(err)
	}
	defer emb.Shutdown()
	c := exec.Command(os.Args[0], "-test.run=^TestLoad_MemoryPerJobConnection$", "-test.timeout=0")
	c.Env = append(os.Environ(), "SHOCKWAVE_CONNMEM_CHILD="+emb.ClientURL(), fmt.Sprintf("SHOCKWAVE_CONNMEM=%d", jobs))
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	holdStdin(b, c)
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = c.Process.Kill()
		_ = c.Wait()
	}()
	eventually(b, 2*time.Minute, "every job connection subscribed", func() bool {
		return emb.Server.NumClients() >= jobs && emb.Server.NumSubscriptions() >= uint32(jobs)
	})
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	leases := make([][]byte, jobs)
	for i := range leases {
		l := protocol.Lease{V: protocol.Version, Job: fmt.Sprintf("job-%05d", i), Round: 7, Action: protocol.Run,
			Start: 1000, Expiry: 1010, Workers: []int{i % 2560}, Extension: true, Epoch: 1}
		leases[i], _ = json.Marshal(l)
	}
	for _, n := range []int{1, DefaultLeaseConns} {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			conns := make([]*nats.Conn, n)
			for i := range conns {
				if conns[i], err = emb.Connect(); err != nil {
					b.Fatal(err)
				}
				defer conns[i].Close()
			}
			parts := make([][]int, n)
			for i := range jobs {
				k := shardOf(fmt.Sprintf("job-%05d", i), n)
				parts[k] = append(parts[k], i)
			}
			cpu := cpuTime(b)
			for b.Loop() {
				var wg sync.WaitGroup
				for k, nc := range conns {
					wg.Go(func() {
						for _, i := range parts[k] {
							if err := nc.Publish(subj.Lease(fmt.Sprintf("job-%05d", i)), leases[i]); err != nil {
								b.Error(err)
							}
						}
						if err := nc.FlushTimeout(10 * time.Second); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64((cpuTime(b)-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}
