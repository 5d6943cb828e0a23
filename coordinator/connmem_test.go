package coordinator

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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
