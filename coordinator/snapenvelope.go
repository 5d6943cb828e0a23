package coordinator

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
)

// The envelope of a state snapshot, format version 1 (docs/durability.md):
//
//	offset  size  field
//	0       8     magic "SWSNAP\r\n" (a text-mode transfer garbles it)
//	8       4     format version, little-endian uint32 (1)
//	12      4     flags: 0, or snapshotDeflate
//	16      8     log sequence the state covers (uint64)
//	24      8     next round (uint64)
//	32      8     body length n (uint64, at most MaxSnapshotBytes)
//	40      32    SHA-256 of bytes 0..39 followed by the body
//	72      n     body
//
// With flags 0 the body is the payload (package internal/wire encoding);
// coordinators before the compressed format wrote only those, and they are
// still read. With snapshotDeflate the body is the payload's length
// (uint64, at most MaxSnapshotBytes) followed by the payload as one raw
// DEFLATE stream (RFC 1951) that ends exactly at the end of the body.
//
// Decoding checks the magic, version, flags, exact length and digest
// before it reads a byte of the body; then it inflates to exactly the
// declared length, growing its buffer with what the stream yields (a
// declared length alone allocates nothing), and refuses bytes after the
// stream's end. The payload decoder is bounded by its input (package wire).

// Snapshot format constants.
const (
	snapshotMagic   = "SWSNAP\r\n"
	snapshotVersion = 1
	snapshotHeader  = 72
	// MaxSnapshotBytes bounds the payload of a state snapshot, and its
	// stored body.
	MaxSnapshotBytes = 1 << 30
	// snapshotDeflate flags a body that is the payload's length and its
	// DEFLATE stream.
	snapshotDeflate = 1
	// snapshotLevel is the compression level. On the week of 2,000 jobs
	// (29 MB of payload) level 1 stores 2.6 MB in 59 ms, level 3 1.8 MB
	// in 55 ms, level 6 1.5 MB in 157 ms; inflating takes 22–37 ms
	// (docs/scale.md, session 15). A snapshot's cost is the NATS
	// server's, which stores it and sends it back once (the writer's
	// check) and at every restart: 16 times fewer bytes.
	snapshotLevel = 3
)

// ErrSnapshotCorrupt is wrapped by every error of DecodeStateSnapshot.
var ErrSnapshotCorrupt = errors.New("coordinator: corrupt state snapshot")

// StateSnapshot is a decoded state snapshot: the log position it covers and
// its payload, checked but not yet restored.
type StateSnapshot struct {
	Seq     uint64 // the last log record folded into the state
	Round   int    // the next round the restored Core schedules
	payload []byte
}

// sealSnapshot compresses a payload, given as the concatenation of parts
// (read in place, not joined), and puts the envelope around it.
func sealSnapshot(seq uint64, round int, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var body bytes.Buffer
	body.Grow(snapshotHeader + 8 + n/8) // about twice what a state compresses to
	body.Write(make([]byte, snapshotHeader))
	body.Write(binary.LittleEndian.AppendUint64(nil, uint64(n)))
	w, _ := deflaters.Get().(*flate.Writer)
	if w == nil {
		var err error
		if w, err = flate.NewWriter(&body, snapshotLevel); err != nil {
			panic(err) // the level is a constant in range
		}
	} else {
		w.Reset(&body)
	}
	for _, p := range parts {
		_, _ = yielder{w}.Write(p) // a bytes.Buffer does not fail; off the loop, in yielding pieces (summary.go)
	}
	_ = w.Close()
	w.Reset(nil)
	deflaters.Put(w)
	return sealBody(seq, round, snapshotDeflate, body.Bytes())
}

// deflaters keeps compressors between snapshots (each holds about a
// megabyte of tables).
var deflaters sync.Pool

// sealPlain puts the envelope around an uncompressed payload, as
// coordinators before the compressed format did (tests: they are read).
func sealPlain(seq uint64, round int, payload []byte) []byte {
	out := append(make([]byte, snapshotHeader, snapshotHeader+len(payload)), payload...)
	return sealBody(seq, round, 0, out)
}

// sealBody fills in the header of out, whose first snapshotHeader bytes
// are reserved for it and the rest is the body.
func sealBody(seq uint64, round int, flags uint32, out []byte) []byte {
	copy(out, snapshotMagic)
	binary.LittleEndian.PutUint32(out[8:], snapshotVersion)
	binary.LittleEndian.PutUint32(out[12:], flags)
	binary.LittleEndian.PutUint64(out[16:], seq)
	binary.LittleEndian.PutUint64(out[24:], uint64(round))
	binary.LittleEndian.PutUint64(out[32:], uint64(len(out)-snapshotHeader))
	sum := snapshotDigest(out[:40], out[snapshotHeader:])
	copy(out[40:72], sum[:])
	return out
}

func snapshotDigest(head, body []byte) [32]byte {
	h := sha256.New()
	h.Write(head)
	h.Write(body)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// DecodeStateSnapshot checks a state snapshot's envelope (magic, version,
// flags, length and SHA-256) and inflates its payload. It does not restore
// the state (see RestoreStateSnapshot).
func DecodeStateSnapshot(data []byte) (*StateSnapshot, error) {
	if len(data) < snapshotHeader {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrSnapshotCorrupt, len(data), snapshotHeader)
	}
	seq, round, flags, err := checkHeader(data[:snapshotHeader], uint64(len(data)-snapshotHeader))
	if err != nil {
		return nil, err
	}
	body := data[snapshotHeader:]
	if sum := snapshotDigest(data[:40], body); !bytes.Equal(sum[:], data[40:72]) {
		return nil, fmt.Errorf("%w: SHA-256 mismatch (stored %x, computed %x)", ErrSnapshotCorrupt, data[40:48], sum[:8])
	}
	payload := body
	if flags == snapshotDeflate {
		var out bytes.Buffer
		if err := inflateBody(body, &out); err != nil {
			return nil, err
		}
		payload = out.Bytes()
	}
	return &StateSnapshot{Seq: seq, Round: round, payload: payload}, nil
}

// inflateBody inflates a snapshotDeflate body into w, checking that it
// yields exactly its declared length and that nothing follows the stream.
// A bytes.Buffer w grows with what the stream yields, up to the declared
// length at most.
func inflateBody(body []byte, w io.Writer) error {
	if len(body) < 8 {
		return fmt.Errorf("%w: compressed body of %d bytes has no payload length", ErrSnapshotCorrupt, len(body))
	}
	n := binary.LittleEndian.Uint64(body)
	if n > MaxSnapshotBytes {
		return fmt.Errorf("%w: payload of %d bytes exceeds the limit %d", ErrSnapshotCorrupt, n, MaxSnapshotBytes)
	}
	if b, ok := w.(*bytes.Buffer); ok {
		// States compress 11–19 times: reserving up to 32 times the
		// stream holds a real payload in one allocation, and a declared
		// length alone reserves nothing more (a stream that inflates
		// further grows the buffer as it goes).
		b.Grow(int(min(n, 32*uint64(len(body)))))
	}
	in := bytes.NewReader(body[8:])
	r := flate.NewReader(in)
	got, err := io.Copy(w, io.LimitReader(r, int64(n)+1))
	switch {
	case err != nil:
		return fmt.Errorf("%w: inflating the payload: %v", ErrSnapshotCorrupt, err)
	case uint64(got) > n:
		return fmt.Errorf("%w: payload inflates past the %d bytes the body says", ErrSnapshotCorrupt, n)
	case uint64(got) < n:
		return fmt.Errorf("%w: payload inflates to %d bytes, the body says %d", ErrSnapshotCorrupt, got, n)
	}
	// The stream ended (io.Copy met its end before the limit): the body
	// must end with it.
	if in.Len() != 0 {
		return fmt.Errorf("%w: %d bytes after the compressed payload", ErrSnapshotCorrupt, in.Len())
	}
	return nil
}

// checkHeader checks a snapshot's header against the length of the body
// that follows it and returns the sequence, round and flags it names.
func checkHeader(head []byte, found uint64) (seq uint64, round int, flags uint32, err error) {
	if string(head[:8]) != snapshotMagic {
		return 0, 0, 0, fmt.Errorf("%w: bad magic %q", ErrSnapshotCorrupt, head[:8])
	}
	if v := binary.LittleEndian.Uint32(head[8:]); v != snapshotVersion {
		return 0, 0, 0, fmt.Errorf("%w: format version %d, this coordinator reads %d", ErrSnapshotCorrupt, v, snapshotVersion)
	}
	if flags = binary.LittleEndian.Uint32(head[12:]); flags != 0 && flags != snapshotDeflate {
		return 0, 0, 0, fmt.Errorf("%w: unknown flags %#x", ErrSnapshotCorrupt, flags)
	}
	seq = binary.LittleEndian.Uint64(head[16:])
	r := binary.LittleEndian.Uint64(head[24:])
	n := binary.LittleEndian.Uint64(head[32:])
	switch {
	case n > MaxSnapshotBytes:
		return 0, 0, 0, fmt.Errorf("%w: body of %d bytes exceeds the limit %d", ErrSnapshotCorrupt, n, MaxSnapshotBytes)
	case n != found:
		return 0, 0, 0, fmt.Errorf("%w: header says %d body bytes, found %d", ErrSnapshotCorrupt, n, found)
	case r > math.MaxInt32:
		return 0, 0, 0, fmt.Errorf("%w: round %d out of range", ErrSnapshotCorrupt, r)
	}
	return seq, int(r), flags, nil
}

// verifySealed reads a sealed snapshot from r and checks it as
// DecodeStateSnapshot does, inflating a compressed payload without
// keeping it: only the stored body is held in memory.
func verifySealed(r io.Reader) (seq uint64, err error) {
	head := make([]byte, snapshotHeader)
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, fmt.Errorf("%w: reading the header: %v", ErrSnapshotCorrupt, err)
	}
	h := sha256.New()
	h.Write(head[:40])
	var body bytes.Buffer
	found, err := io.Copy(io.MultiWriter(h, &body), io.LimitReader(r, MaxSnapshotBytes+1))
	if err != nil {
		return 0, fmt.Errorf("%w: reading the body: %v", ErrSnapshotCorrupt, err)
	}
	seq, _, flags, err := checkHeader(head, uint64(found))
	if err != nil {
		return 0, err
	}
	if sum := h.Sum(nil); !bytes.Equal(sum, head[40:72]) {
		return 0, fmt.Errorf("%w: SHA-256 mismatch (stored %x, computed %x)", ErrSnapshotCorrupt, head[40:48], sum[:8])
	}
	if flags == snapshotDeflate {
		if err := inflateBody(body.Bytes(), io.Discard); err != nil {
			return 0, err
		}
	}
	return seq, nil
}
