package protocol_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

// sameAsMarshal fails unless MarshalLease and AppendLease write json.Marshal's
// bytes for l, or all three fail.
func sameAsMarshal(t *testing.T, l *protocol.Lease) {
	t.Helper()
	want, werr := json.Marshal(l)
	got, gerr := protocol.MarshalLease(l)
	app, aerr := protocol.AppendLease([]byte("prefix"), l)
	if (werr == nil) != (gerr == nil) || (werr == nil) != (aerr == nil) {
		t.Fatalf("lease %+v: json.Marshal error %v, MarshalLease error %v, AppendLease error %v", l, werr, gerr, aerr)
	}
	if werr != nil {
		return
	}
	if !bytes.Equal(got, want) || !bytes.Equal(app, append([]byte("prefix"), want...)) {
		t.Fatalf("lease %+v:\njson.Marshal %s\nMarshalLease %s\nAppendLease  %s", l, want, got, app)
	}
}

func TestMarshalLease_WritesTheBytesOfJSONMarshal(t *testing.T) {
	leases := []*protocol.Lease{
		nil,
		{},
		{V: 1, Job: "j1", Round: 3, Action: protocol.Run, Workers: []int{0, 1}, Extension: true, Start: 100, Expiry: 230},
		{V: 1, Job: "j-2", Round: 1 << 40, Action: protocol.Suspend, Workers: []int{}, Devices: []protocol.NodeDevices{}, Start: 0.1, Expiry: 1e21},
		{V: 1, Job: "x", Action: protocol.Run, Workers: []int{7, 2049}, Epoch: 1<<64 - 1,
			Devices: []protocol.NodeDevices{{Node: "node-a", Devices: []int{7}}, {Node: "n_b", Devices: nil}, {Node: "", Devices: []int{}}},
			Start:   1700000000.123456, Expiry: 1700000120.123456, Reason: "rebalanced"},
		{V: -1, Job: "<script>&\"\\\n\t\b\f\x01\x7f é \xff \u2028 \u2029", Action: "RUN\x00", Round: -5,
			Start: 1e-7, Expiry: -1e-300, Reason: "ends at 2 < 3 & \"quoted\""},
		{Job: "a<b", Action: "&", Reason: ">"}, {Job: "\x7f"}, {Reason: "tab\there"}, {Reason: "é"}, {Reason: "\xff"}, {Reason: "\u2028"},
		{Start: 123456789012345678901234567890, Expiry: 9.999999e-7},
		{Start: math.Copysign(0, -1), Expiry: 5e-324},
		{Start: math.NaN()},
		{Expiry: math.Inf(-1)},
	}
	for _, l := range leases {
		sameAsMarshal(t, l)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		l := &protocol.Lease{V: 1, Job: "job-" + string(rune('a'+r.IntN(26))), Round: r.IntN(1 << 20), Action: protocol.Run,
			Epoch: r.Uint64N(4), Extension: r.IntN(2) == 0,
			Start: math.Float64frombits(r.Uint64()), Expiry: r.Float64() * math.Pow(10, float64(r.IntN(60)-30))}
		for range r.IntN(5) {
			l.Workers = append(l.Workers, r.IntN(2560))
		}
		sameAsMarshal(t, l)
	}
}

func FuzzMarshalLease(f *testing.F) {
	f.Add("j1", "RUN", "", 3, 0, uint64(0), true, 100.0, 230.0, "n0")
	f.Add("<&>", "SUSPEND", "\xff\u2028", -1, 4095, uint64(7), false, 1e-7, 1e21, "")
	f.Fuzz(func(t *testing.T, job, action, reason string, round, worker int, epoch uint64, ext bool, start, expiry float64, node string) {
		l := &protocol.Lease{V: 1, Job: job, Round: round, Action: protocol.Action(action), Epoch: epoch, Extension: ext,
			Start: start, Expiry: expiry, Reason: reason}
		if worker%3 != 0 {
			l.Workers = []int{worker, worker / 2}
			l.Devices = []protocol.NodeDevices{{Node: node, Devices: l.Workers}}
		}
		sameAsMarshal(t, l)
	})
}

// BenchmarkMarshalLease compares the encoder with json.Marshal on a RUN
// lease of an 8-GPU job on two nodes.
func BenchmarkMarshalLease(b *testing.B) {
	l := &protocol.Lease{V: 1, Job: "job-004217", Round: 1838, Action: protocol.Run, Workers: []int{8, 9, 10, 11, 40, 41, 42, 43},
		Devices: []protocol.NodeDevices{{Node: "node-001", Devices: []int{0, 1, 2, 3}}, {Node: "node-005", Devices: []int{0, 1, 2, 3}}},
		Epoch:   3, Extension: true, Start: 1763980000.25, Expiry: 1763980130.25}
	b.Run("protocol", func(b *testing.B) {
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			if _, err := protocol.MarshalLease(l); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			if _, err := json.Marshal(l); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
}
