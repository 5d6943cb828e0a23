package coordinator

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"runtime"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// The work that follows a round off the loop, and the loop. The round
// summary (the job table and the plan, hashed, encoded and compressed for
// the KV bucket) and the state snapshot's compression run on goroutines of
// their own, so that the loop folds events meanwhile. But a goroutine that
// computes without blocking keeps its processor until the scheduler
// preempts it, up to 10 ms later, and the coordinator has two processors
// on the machines we size for. In an execution trace of the 10,000-job
// load test (session 20) the summary's writer took 60 ms of CPU a round
// in runs of up to 20 ms, and while it and a collection's worker held both
// processors the loop, woken by an event, waited 25 ms to run: the events
// over 10 ms gathered in the tenth of a second after each tick.
//
// So this work yields between pieces (runtime.Gosched): every
// jobsPerYield jobs it encodes and every yieldBytes it compresses, each
// well under a millisecond. A goroutine that is waiting for a processor
// then waits for one piece at most, and the work itself takes as long as
// before when nothing else wants to run.
const (
	jobsPerYield = 256
	yieldBytes   = 64 << 10
)

// yielder is an io.Writer that passes what it is given to w in pieces of
// at most yieldBytes, yielding the processor between them.
type yielder struct{ w io.Writer }

func (y yielder) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), yieldBytes)
		m, err := y.w.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		if p = p[k:]; len(p) > 0 {
			runtime.Gosched()
		}
	}
	return n, nil
}

// jobsJSON is json.Marshal(jobs), byte for byte, encoded job by job with
// a yield every jobsPerYield jobs.
func jobsJSON(jobs []JobStatus) ([]byte, error) {
	if jobs == nil {
		return []byte("null"), nil
	}
	return appendEach(make([]byte, 0, 2+320*len(jobs)), jobs) // a job encodes to 250–350 bytes
}

// planJSON is json.Marshal(plan), byte for byte, its explanations (one
// per job, the bulk of it) encoded as jobsJSON encodes jobs.
func planJSON(plan *policy.Plan) ([]byte, error) {
	if plan == nil || len(plan.Explain) == 0 {
		return json.Marshal(plan)
	}
	short := *plan
	short.Explain = nil
	head, err := json.Marshal(&short)
	if err != nil {
		return nil, err
	}
	out := append(head[:len(head)-1:len(head)-1], `,"explain":`...)
	if out, err = appendEach(out, plan.Explain); err != nil {
		return nil, err
	}
	return append(out, '}'), nil
}

// appendEach appends the JSON array of items to out, encoding them one by
// one and yielding every jobsPerYield.
func appendEach[T any](out []byte, items []T) ([]byte, error) {
	buf := bytes.NewBuffer(out)
	enc := json.NewEncoder(buf)
	buf.WriteByte('[')
	for i := range items {
		if i > 0 {
			buf.WriteByte(',')
			if i%jobsPerYield == 0 {
				runtime.Gosched()
			}
		}
		if err := enc.Encode(&items[i]); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1) // the Encoder's newline
	}
	buf.WriteByte(']')
	return buf.Bytes(), nil
}

// leasesJSON is json.Marshal(leases), byte for byte, in yielding pieces.
func leasesJSON(leases []protocol.Lease) ([]byte, error) {
	if leases == nil {
		return []byte("null"), nil
	}
	return appendEach(make([]byte, 0, 2+200*len(leases)), leases)
}

// roundJSON is json.Marshal(r), byte for byte, its plan and leases
// encoded in yielding pieces (TestYield_RoundsEncodeAsJSONMarshal keeps
// it in step with Round).
func roundJSON(r *Round) ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	head, err := json.Marshal(struct {
		Index  int     `json:"index"`
		Start  float64 `json:"start"`
		Active int     `json:"active"`
	}{r.Index, r.Start, r.Active})
	if err != nil {
		return nil, err
	}
	plan, err := planJSON(r.Plan)
	if err != nil {
		return nil, err
	}
	leases, err := leasesJSON(r.Leases)
	if err != nil {
		return nil, err
	}
	rest, err := json.Marshal(struct {
		Ended   []Ended  `json:"ended,omitempty"`
		Lost    []Ended  `json:"lost,omitempty"`
		Covered []string `json:"covered,omitempty"`
	}{r.Ended, r.Lost, r.Covered})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(head)+len(plan)+len(leases)+len(rest)+20)
	out = append(out, head[:len(head)-1]...)
	out = append(append(out, `,"plan":`...), plan...)
	out = append(append(out, `,"leases":`...), leases...)
	if len(rest) > 2 { // {} when all three are empty
		out = append(append(out, ','), rest[1:len(rest)-1]...)
	}
	return append(out, '}'), nil
}

// digestJSON is the digest of a job table and a plan given as their JSON.
func digestJSON(jobs, plan []byte) string {
	h := sha256.New()
	_, _ = yielder{h}.Write(jobs)
	_, _ = yielder{h}.Write(plan)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// digestOf hashes a job table and a plan; it returns the plan's JSON too.
// What does not encode hashes as no bytes, as before.
func digestOf(jobs []JobStatus, plan *policy.Plan) (string, json.RawMessage) {
	jb, _ := jobsJSON(jobs)
	pb, _ := planJSON(plan)
	return digestJSON(jb, pb), pb
}

// summarize fills in the digest and the plan of a round summary and
// encodes it, encoding the job table once for both.
func summarize(snap *Snapshot, plan *policy.Plan) ([]byte, error) {
	jb, err := jobsJSON(snap.Jobs)
	pb, _ := planJSON(plan)
	snap.Digest, snap.Plan = digestJSON(jb, pb), pb
	if err != nil {
		return nil, err
	}
	return encodeSnapshotWith(snap, jb)
}

// encodeSnapshot gzips the JSON of s: a 10,000-job table is about 3 MB of
// JSON and 90 kB compressed, well under the KV value limit. s.Plan is
// compact JSON, as json.Marshal writes it.
func encodeSnapshot(s *Snapshot) ([]byte, error) {
	jb, err := jobsJSON(s.Jobs)
	if err != nil {
		return nil, err
	}
	return encodeSnapshotWith(s, jb)
}

// snapshotHead is the fields of a Snapshot before its job table, in its
// order; the plan and the time it was written follow the table
// (TestSummary_IsTheSnapshotsJSON keeps them in step with Snapshot).
type snapshotHead struct {
	V      int     `json:"v"`
	Round  int     `json:"round"`
	Seq    uint64  `json:"seq"`
	Time   float64 `json:"time"`
	Policy string  `json:"policy"`
	GPUs   int     `json:"gpus"`
	Digest string  `json:"digest"`
}

// encodeSnapshotWith is encodeSnapshot with the job table's JSON given:
// what json.NewEncoder(w).Encode(s) writes, compressed in yielding pieces.
func encodeSnapshotWith(s *Snapshot, jobs []byte) ([]byte, error) {
	head, err := json.Marshal(snapshotHead{V: s.V, Round: s.Round, Seq: s.Seq, Time: s.Time, Policy: s.Policy, GPUs: s.GPUs, Digest: s.Digest})
	if err != nil {
		return nil, err
	}
	written, err := json.Marshal(s.Written)
	if err != nil {
		return nil, err
	}
	parts := [][]byte{head[:len(head)-1], []byte(`,"jobs":`), jobs}
	if len(s.Plan) > 0 {
		parts = append(parts, []byte(`,"plan":`), s.Plan)
	}
	parts = append(parts, []byte(`,"written":`), written, []byte("}\n"))
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for _, part := range parts {
		if _, err := (yielder{zw}).Write(part); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
