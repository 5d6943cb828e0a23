package coordinator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Carried records: the event batches node agents carry (uplink.go) enter
// the log several to a record. At 10,000 resident jobs the agents carry
// 10,000 batches a second; one record each cost the server a stream
// append, a delivery to the log's consumer and, after each snapshot, a
// purge step per record, and cost the service a header parse per record
// (docs/scale.md, session 18). The leader gathers the batches that arrive
// within CarryWindow of the first into one record on <prefix>.log.carried,
// and the fold takes it apart into the records it used to get, in order,
// within one step of the loop, so a snapshot never falls inside one.
//
// The record's data is a version byte (carriedVersion) and then, per
// batch: the node whose agent carried it and the job, each a string
// (an unsigned varint length, then the bytes); the agent's own headers
// (keptHeader), as a count of pairs and then each key and value as a
// string, in order; and the batch as the agent sent it, as a string. The
// record's NATS header carries hdrResidents when agents may speak for
// resident jobs, as a single carried batch's would.
const logCarried = "log.carried"

const carriedVersion = 1

// maxCarried bounds the batches of one carried record; the record's size is
// bounded by MaxMessageBytes as well (a single batch larger than that was
// refused before it was carried).
const maxCarried = 512

// defaultCarryWindow is ServiceConfig.CarryWindow's default, and
// MaxCarryWindow its largest value.
const (
	defaultCarryWindow = time.Millisecond
	MaxCarryWindow     = 100 * time.Millisecond
)

// maxCarriedHeader bounds the headers of one carried batch. With a batch
// of up to MaxMessageBytes, node and job names of up to 256 bytes and the
// framing, a record of one batch still fits the log's message limit
// (MaxMessageBytes + 4 KiB, persist.go).
const maxCarriedHeader = 2048

// carriedBatch is one batch an agent carried, with the agent's own
// headers (keptHeader; nil when none).
type carriedBatch struct {
	node, job string
	hdr       nats.Header
	data      []byte
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// appendCarried encodes b onto buf (which starts with the version byte).
func appendCarried(buf []byte, b carriedBatch) []byte {
	buf = appendString(buf, b.node)
	buf = appendString(buf, b.job)
	buf = appendHeader(buf, b.hdr)
	buf = binary.AppendUvarint(buf, uint64(len(b.data)))
	return append(buf, b.data...)
}

// appendHeader encodes h: its pairs, keys in order.
func appendHeader(buf []byte, h nats.Header) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	buf = binary.AppendUvarint(buf, uint64(n))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			buf = appendString(appendString(buf, k), v)
		}
	}
	return buf
}

// headerSize is what appendHeader adds for h, at most.
func headerSize(h nats.Header) int {
	n := binary.MaxVarintLen32
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 2*binary.MaxVarintLen32
		}
	}
	return n
}

// carriedSize is what appendCarried adds for b, at most.
func carriedSize(b carriedBatch) int {
	return len(b.node) + len(b.job) + len(b.data) + headerSize(b.hdr) + 3*binary.MaxVarintLen32
}

// reservedHeader says a key is one the service writes or NATS acts on,
// which an agent's batch never brings into the log (keptHeader).
func reservedHeader(k string) bool {
	return len(k) >= 5 && strings.EqualFold(k[:5], "nats-") || strings.EqualFold(k, hdrVia) ||
		strings.EqualFold(k, protocol.HdrJob) || strings.EqualFold(k, hdrResidents)
}

var errCarried = errors.New("coordinator: damaged carried record")

// decodeCarried takes a carried record's data apart; limit bounds each
// batch (0: none). Any damage refuses the whole record, naming where.
func decodeCarried(data []byte, limit int) ([]carriedBatch, error) {
	if len(data) == 0 || data[0] != carriedVersion {
		return nil, fmt.Errorf("%w: version %v, want %d", errCarried, head(data), carriedVersion)
	}
	rd := &fieldReader{rest: data[1:], item: "batch"}
	field := rd.field
	header := func(i int) (nats.Header, error) {
		n, k := binary.Uvarint(rd.rest)
		if k <= 0 || n > maxCarriedHeader/2 {
			return nil, fmt.Errorf("%w: batch %d: bad count of its headers", errCarried, i)
		}
		rd.rest = rd.rest[k:]
		var h nats.Header
		size := 0
		for range n {
			keyb, err := field(i, "header key", 256)
			if err != nil {
				return nil, err
			}
			vb, err := field(i, "header value", maxCarriedHeader)
			if err != nil {
				return nil, err
			}
			key, v := string(keyb), string(vb)
			if size += len(key) + len(v); size > maxCarriedHeader {
				return nil, fmt.Errorf("%w: batch %d: its headers exceed %d bytes", errCarried, i, maxCarriedHeader)
			}
			if key == "" || reservedHeader(key) {
				return nil, fmt.Errorf("%w: batch %d: header %q may not be carried", errCarried, i, key)
			}
			if h == nil {
				h = nats.Header{}
			}
			h[key] = append(h[key], v)
		}
		return h, nil
	}
	var out []carriedBatch
	for i := 0; len(rd.rest) > 0; i++ {
		if i == maxCarried {
			return nil, fmt.Errorf("%w: more than %d batches", errCarried, maxCarried)
		}
		nodeb, err := field(i, "node", 256)
		if err != nil {
			return nil, err
		}
		node := string(nodeb)
		if err := protocol.ValidateNodeName("carried record", "node", node); err != nil {
			return nil, fmt.Errorf("%w: batch %d: %w", errCarried, i, err)
		}
		jobb, err := field(i, "job", 256)
		if err != nil {
			return nil, err
		}
		job := string(jobb)
		if err := protocol.ValidateJobID("carried record", job); err != nil {
			return nil, fmt.Errorf("%w: batch %d: %w", errCarried, i, err)
		}
		hdr, err := header(i)
		if err != nil {
			return nil, err
		}
		data, err := field(i, "batch", limit)
		if err != nil {
			return nil, err
		}
		out = append(out, carriedBatch{node: node, job: job, hdr: hdr, data: data})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no batches", errCarried)
	}
	return out, nil
}

// CarriedSubject is the subject of carried records in the log of prefix;
// CarriedJobs names the job of each batch in one, in order. Both are for
// tools and tests that read the log.
func CarriedSubject(prefix string) string { return prefix + "." + logCarried }

// CarriedJobs: see CarriedSubject.
func CarriedJobs(data []byte) ([]string, error) {
	bs, err := decodeCarried(data, 0)
	jobs := make([]string, len(bs))
	for i, b := range bs {
		jobs[i] = b.job
	}
	return jobs, err
}

// fieldReader takes a carried record's length-prefixed fields in turn;
// a field is a slice of the record, not a copy.
type fieldReader struct {
	rest []byte
	item string // what the record holds: "batch", "registration"
}

// field takes the next field: the what of item i, of at most most bytes
// (0: any).
func (rd *fieldReader) field(i int, what string, most int) ([]byte, error) {
	n, k := binary.Uvarint(rd.rest)
	switch {
	case k <= 0:
		return nil, fmt.Errorf("%w: %s %d: bad length of its %s", errCarried, rd.item, i, what)
	case most > 0 && n > uint64(most):
		return nil, fmt.Errorf("%w: %s %d: its %s has %d bytes, more than %d", errCarried, rd.item, i, what, n, most)
	case n > uint64(len(rd.rest)-k):
		return nil, fmt.Errorf("%w: %s %d: its %s is cut short", errCarried, rd.item, i, what)
	}
	b := rd.rest[k : k+int(n)]
	rd.rest = rd.rest[k+int(n):]
	return b, nil
}

// head is the first byte of data, or "none".
func head(data []byte) any {
	if len(data) == 0 {
		return "none"
	}
	return data[0]
}

// carriedRecord folds the records a carried record holds, in order; each
// record and its outcome is in the outcome's held list, for the service
// to act on as it would on a held record (Service.handle). A damaged
// carried record is refused whole.
func (f *fold) carriedRecord(r record) outcome {
	o := outcome{kind: kindCarried}
	recs, err := f.unpack(r)
	if err != nil {
		o.reject("bad_carried", err)
		return o
	}
	o.held = make([]heldOutcome, len(recs))
	for i, rec := range recs {
		o.held[i] = heldOutcome{r: rec, o: f.apply(rec)}
	}
	return o
}

// unpack turns a carried record into the records its batches would have
// been on their own: each on its job's events subject, marked with the
// node that carried it, at the carried record's place in the log. The
// service's reader has usually done it already (r.carried).
func (f *fold) unpack(r record) ([]record, error) {
	if r.carried != nil || r.decErr != nil {
		return r.carried, r.decErr
	}
	return unpackRecord(r, f.subj, f.limit)
}

// isCarried says subject is that of a carried record in the log of subj:
// of batches (log.carried) or of registrations (log.registers).
func isCarried(subj protocol.Subjects, subject string) bool {
	return subject == subj.Prefix+"."+logCarried || subject == subj.Prefix+"."+logRegisters
}

// unpackRecord takes a carried record of either kind apart.
func unpackRecord(r record, subj protocol.Subjects, limit int) ([]record, error) {
	if r.Subject == subj.Prefix+"."+logRegisters {
		return unpackRegisters(r, subj, limit)
	}
	return unpackCarried(r, subj, limit)
}

// unpackCarried decodes r's batches (and each batch's events, as the
// reader does for a job's own records).
func unpackCarried(r record, subj protocol.Subjects, limit int) ([]record, error) {
	bs, err := decodeCarried(r.Data, limit)
	if err != nil {
		return nil, err
	}
	residents := r.Header.Get(hdrResidents) != ""
	out := make([]record, len(bs))
	for i, b := range bs {
		out[i] = record{Seq: r.Seq, Pending: r.Pending, Time: r.Time, Subject: subj.Events(b.job), Header: b.hdr, Data: b.data,
			via: b.node, residents: residents}
		out[i].batch, out[i].decErr = protocol.DecodeBatch(b.data, limit)
	}
	return out, nil
}

// gatherer takes the items (carried batches, registrations) the leader
// gathers into records, on a goroutine of its own for the service's life.
// An item waits at most window after the first one of its record; a
// window < 0 appends each item on its own, as before carried records. A
// record holds at most limit bytes of items, or one item.
type gatherer[T any] struct {
	in     chan T
	window time.Duration
	limit  int
}

func newGatherer[T any](window time.Duration, limit int) *gatherer[T] {
	return &gatherer[T]{in: make(chan T, 4096), window: window, limit: limit}
}

// carry gathers and appends until ctx ends, then appends what it holds.
func (s *Service) carry(ctx context.Context, c *gatherer[carriedBatch]) {
	buf := []byte{carriedVersion}
	var hdr nats.Header
	if s.cfg.AgentsCarryResidents {
		hdr = nats.Header{hdrResidents: []string{"1"}}
	}
	gather(ctx, c.in, c.window,
		func(b carriedBatch, n int) bool { return n == 0 || len(buf)+carriedSize(b) <= max(c.limit, 1) },
		func(b carriedBatch) { buf = appendCarried(buf, b) },
		func(n int) {
			s.m.carried.Observe(float64(n))
			if err := s.nc.PublishMsg(&nats.Msg{Subject: s.subj.Prefix + "." + logCarried, Header: hdr, Data: buf}); err != nil {
				s.log.Debug().Err(err).Int("batches", n).Msg("cannot append carried batches")
			}
			buf = buf[:1] // PublishMsg copied the data
		})
}

// gather collects the items of in into records until ctx ends: add puts
// an item in the record being gathered, which flush appends (n: its
// items) once window has passed since its first item, once it holds
// maxCarried, before an item that does not fit it (fits, given the items
// it holds) and when ctx ends.
func gather[T any](ctx context.Context, in <-chan T, window time.Duration, fits func(T, int) bool, add func(T), flush func(n int)) {
	n := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	end := func() {
		timer.Stop()
		if n > 0 {
			flush(n)
			n = 0
		}
	}
	for {
		select {
		case <-ctx.Done():
			end()
			return
		case <-timer.C:
			end()
		case it := <-in:
			if !fits(it, n) {
				end()
			}
			add(it)
			if n++; n == 1 {
				timer.Reset(window)
			}
			if n == maxCarried {
				end()
			}
		}
	}
}
