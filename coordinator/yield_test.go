package coordinator

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shockwave-sched/shockwave/internal/wire"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// TestSummary_IsTheSnapshotsJSON: the round summary, encoded job by job
// with yields, is the JSON a json.Encoder writes of the whole Snapshot,
// byte for byte, and its digest is the hash of json.Marshal of the table
// and the plan, for tables of every size around the yields (none, empty,
// one, a yield's worth and more), with every field of the summary and of
// the jobs set. A table that does not encode is refused as before.
func TestSummary_IsTheSnapshotsJSON(t *testing.T) {
	head := reflect.TypeFor[snapshotHead]()
	if n := reflect.TypeFor[Snapshot]().NumField(); n != head.NumField()+3 {
		t.Fatalf("Snapshot has %d fields, snapshotHead %d besides the jobs, the plan and the time: keep them in step", n, head.NumField())
	}
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := 0
	c := coreWithJobs(t, topology.Uniform(8, 8), p, 2*jobsPerYield+3, 1000, func() int { w++; return 1 + w%3 })
	if _, err := c.Tick(0); err != nil {
		t.Fatal(err)
	}
	all := c.Jobs()
	all[0].Reason, all[0].Leases, all[0].Node = "a <reason> & \u2028 more", "relayed", "n-0" // escaped alike
	plan := c.LastPlan()
	if len(plan.Explain) < jobsPerYield+1 {
		t.Fatalf("the plan explains %d jobs", len(plan.Explain))
	}
	for _, n := range []int{-1, 0, 1, jobsPerYield, jobsPerYield + 1, len(plan.Explain)} {
		var p *policy.Plan
		if n >= 0 {
			cut := *plan
			cut.Explain, cut.Note = plan.Explain[:n:n], "a note <&>"
			p = &cut
		}
		got, err := planJSON(p)
		want, _ := json.Marshal(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("plan explaining %d jobs: %.300s (%v), want %.300s", n, got, err, want)
		}
	}
	written := time.Date(2026, 11, 25, 21, 0, 0, 123, time.UTC)
	for _, n := range []int{-1, 0, 1, jobsPerYield, jobsPerYield + 1, len(all)} {
		var jobs []JobStatus
		if n >= 0 {
			jobs = all[:n:n]
		}
		old := sha256.New()
		jb, _ := json.Marshal(jobs)
		pb, _ := json.Marshal(plan)
		old.Write(jb)
		old.Write(pb)
		d, gotPlan := digestOf(jobs, plan)
		if want := hex.EncodeToString(old.Sum(nil)[:16]); d != want || !bytes.Equal(gotPlan, pb) {
			t.Fatalf("%d jobs: digest %s, want %s", n, d, want)
		}
		snap := &Snapshot{V: protocol.Version, Round: 7, Seq: 1234, Time: 35.5, Policy: "shockwave", GPUs: 64, Jobs: jobs, Written: written}
		data, err := summarize(snap, plan)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Digest != d || !bytes.Equal(snap.Plan, pb) {
			t.Fatalf("%d jobs: summary digest %s, want %s", n, snap.Digest, d)
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(snap); err != nil {
			t.Fatal(err)
		}
		if got := gunzip(t, data); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%d jobs: the summary's JSON differs from the Snapshot's:\n got %.300s\nwant %.300s", n, got, want.Bytes())
		}
		back, err := DecodeSnapshot(data)
		if err != nil || back.Digest != d || len(back.Jobs) != len(jobs) || !back.Written.Equal(written) {
			t.Fatalf("%d jobs: decoded %+v, %v", n, back, err)
		}
		snap.Plan = nil // omitted, as a Snapshot omits it
		data, _ = encodeSnapshot(snap)
		want.Reset()
		_ = json.NewEncoder(&want).Encode(snap)
		if got := gunzip(t, data); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%d jobs, no plan: got %.300s, want %.300s", n, got, want.Bytes())
		}
	}
	bad := append([]JobStatus(nil), all[:3]...)
	bad[2].Throughput = math.NaN()
	snap := &Snapshot{Jobs: bad}
	if _, err := summarize(snap, plan); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("a table with NaN encoded: %v", err)
	}
	pb, _ := json.Marshal(plan)
	if snap.Digest != digestJSON(nil, pb) {
		t.Fatalf("a table that does not encode hashed as %s, want the plan's hash alone", snap.Digest)
	}
}

// TestYielder_PassesEveryByteInOrder: what goes through a yielder in
// writes of any size reaches the writer whole, in pieces of at most
// yieldBytes.
func TestYielder_PassesEveryByteInOrder(t *testing.T) {
	src := make([]byte, 3*yieldBytes+17)
	for i := range src {
		src[i] = byte(i * 7)
	}
	var pieces pieceCounter
	y := yielder{&pieces}
	for _, k := range []int{0, 1, yieldBytes - 1, yieldBytes + 1, len(src)} {
		pieces.Reset()
		for off := 0; off < len(src); {
			end := min(len(src), off+max(k, 1))
			if n, err := y.Write(src[off:end]); n != end-off || err != nil {
				t.Fatalf("write of %d: %d, %v", end-off, n, err)
			}
			off = end
		}
		if !bytes.Equal(pieces.Bytes(), src) || pieces.largest > yieldBytes {
			t.Fatalf("writes of %d: %d bytes arrived (of %d), largest piece %d", k, pieces.Len(), len(src), pieces.largest)
		}
	}
}

type pieceCounter struct {
	bytes.Buffer
	largest int
}

func (p *pieceCounter) Write(b []byte) (int, error) {
	p.largest = max(p.largest, len(b))
	return p.Buffer.Write(b)
}

func gunzip(t *testing.T, data []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestYield_RoundsEncodeAsJSONMarshal: the snapshot's last round and
// leases, encoded in yielding pieces, are json.Marshal's bytes, for a
// round as a tick leaves it and with each of its optional parts empty
// or set.
func TestYield_RoundsEncodeAsJSONMarshal(t *testing.T) {
	if n := reflect.TypeFor[Round]().NumField(); n != 8 {
		t.Fatalf("Round has %d fields, roundJSON encodes 8: keep it in step", n)
	}
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := coreWithJobs(t, topology.Uniform(40, 8), p, jobsPerYield+40, 1000, func() int { return 1 })
	r, err := c.Tick(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Leases) <= jobsPerYield {
		t.Fatalf("the round has %d leases", len(r.Leases))
	}
	ended := []Ended{{Job: "a", State: Completed, Reason: "done <&>"}}
	for i, v := range []Round{*r, {}, {Index: 3, Plan: r.Plan, Leases: r.Leases[:0]},
		{Index: 4, Leases: r.Leases[:1], Ended: ended}, {Lost: ended}, {Covered: []string{"x", "y"}},
		{Index: 5, Start: 2.5, Active: 9, Plan: r.Plan, Leases: r.Leases, Ended: ended, Lost: ended, Covered: []string{"z"}}} {
		got, err := roundJSON(&v)
		want, _ := json.Marshal(&v)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: %.400s (%v)\nwant %.400s", i, got, err, want)
		}
		got, err = leasesJSON(v.Leases)
		want, _ = json.Marshal(v.Leases)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d's leases: %.300s (%v), want %.300s", i, got, err, want)
		}
	}
	if got, _ := roundJSON(nil); string(got) != "null" {
		t.Fatalf("no round: %s", got)
	}
}

// TestYield_TheLongEncodingsLetAWaitingGoroutineRun: on one processor, a
// goroutine made runnable before each of the encodings that run off the
// loop has run by the time it returns (it would wait for the scheduler's
// preemption, 10 ms, were the encoding not to yield).
func TestYield_TheLongEncodingsLetAWaitingGoroutineRun(t *testing.T) {
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := coreWithJobs(t, topology.Uniform(40, 8), p, 2*jobsPerYield+1, 1000, func() int { return 1 })
	r, err := c.Tick(0)
	if err != nil {
		t.Fatal(err)
	}
	jobs := c.Jobs()
	big := bytes.Repeat([]byte("shockwave "), yieldBytes/4)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, enc := range []struct {
		name string
		f    func()
	}{
		{"yielder", func() { _, _ = yielder{io.Discard}.Write(big) }},
		{"jobsJSON", func() { _, _ = jobsJSON(jobs) }},
		{"planJSON", func() { _, _ = planJSON(r.Plan) }},
		{"leasesJSON", func() { _, _ = leasesJSON(r.Leases) }},
		{"digestJSON", func() { digestJSON(big, nil) }},
		{"the core's image", func() {
			img, _, err := c.capture()
			if err != nil {
				t.Error(err)
			}
			var e wire.Encoder
			_ = img.append(&e)
		}},
	} {
		var ran atomic.Bool
		go ran.Store(true)
		enc.f()
		if !ran.Load() {
			t.Errorf("%s: the waiting goroutine did not run", enc.name)
		}
	}
}

// BenchmarkRoundSummary_10000Jobs: the writer's work after each round at
// the load test's shape (10,000 jobs on 320 nodes of 8 GPUs): the
// digest, the JSON and the compression of the round summary (summarize),
// and its per-job metrics (observeJobs), as writeSnapshots does them.
func BenchmarkRoundSummary_10000Jobs(b *testing.B) {
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := coreWithJobs(b, topology.Uniform(320, 8), p, 10_000, 100_000, func() int { return 1 })
	r, err := c.Tick(0)
	if err != nil {
		b.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	jobs, plan := c.Jobs(), c.LastPlan()
	b.ReportAllocs()
	b.ResetTimer()
	size := 0
	for range b.N {
		m.observeJobs(r, jobs, DefaultJobSeries)
		data, err := summarize(&Snapshot{V: protocol.Version, Jobs: jobs}, plan)
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "stored-bytes")
}
