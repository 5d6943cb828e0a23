package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The fuzz targets check, for every decoder, that no input panics, that an
// accepted message validates, and that an accepted message survives an
// encode/decode round trip unchanged. `go test` runs the seeds below; `make
// fuzz-short` fuzzes each target briefly.

var seeds = []string{
	goodRegister, goodBatch, goodLease, ``, `{}`, `null`, `[]`, `{"v":1}`, `{"v":2}`, `{"v":1.0}`,
	`{"v":1,"job":"x","events":null}`, `{"v":1,"job":"` + string(rune(0)) + `"}`,
	`{"v":1,"job":"j","model":"m","workers":1,"batch_size":1,"dataset_size":1,"total_steps":1,"schedule":{"batch_sizes":[1,2],"epoch_seconds":[1,1e309]}}`,
	`{"v":1,"error":{"code":"conflict","message":"x"}}`,
	`{"v":1,"op":"events","data":` + goodBatch + `}`, `{"v":1,"op":"register","id":7,"data":` + goodRegister + `}`,
	`{"v":1,"op":"flush","id":1}`, `{"v":1,"op":"reply","id":3,"data":{"v":1,"job":"j"}}`, `{"v":1,"op":"reconnected"}`,
	`{"v":1,"op":"reply","id":2,"error":{"code":"unavailable","message":"x"}}`,
	`{"v":1,"job":"j","state":"lost","round_seconds":120,"round":3,"now":1700000000,"last_seq":9,"steps_done":5,"epoch":0}`,
	`{"v":1,"round":2,"log_seq":40,"jobs":[{"job":"a","state":"active","model":"m","workers":1,"batch_size":32,"steps_done":1,"total_steps":2,"epoch":0,"throughput":1,"run_time_s":1,"submit_time":0,"admit_time":0,"last_run_round":1,"failed_leases":0,"last_seq":3}],"plan":{"round":1,"run":["a"],"solved":true}}`,
}

func fuzzDecoder[T any](f *testing.F, decode func([]byte, int) (*T, error), validate func(*T) error) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decode(data, 1<<20)
		if err != nil {
			if v != nil {
				t.Fatalf("error %v with a value", err)
			}
			if !errors.Is(err, protocol.ErrInvalid) && protocol.Reason(err) != "invalid" {
				t.Fatalf("error %v is not a protocol error", err)
			}
			return
		}
		if err := validate(v); err != nil {
			t.Fatalf("accepted an invalid message: %v", err)
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		v2, err := decode(enc, 1<<20)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", enc, err)
		}
		enc2, _ := json.Marshal(v2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the message:\n%s\n%s", enc, enc2)
		}
	})
}

func FuzzDecodeRegister(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeRegister, (*protocol.Register).Validate)
}

func FuzzDecodeBatch(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeBatch, (*protocol.Batch).Validate)
}

func FuzzDecodeLease(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeLease, (*protocol.Lease).Validate)
}

func FuzzDecodeRegisterReply(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeRegisterReply, (*protocol.RegisterReply).Validate)
}

func FuzzDecodeStatusRequest(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeStatusRequest, (*protocol.StatusRequest).Validate)
}

func FuzzDecodeUplinkRequest(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeUplinkRequest, (*protocol.UplinkRequest).Validate)
}

func FuzzDecodeUplinkAnswer(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeUplinkAnswer, (*protocol.UplinkAnswer).Validate)
}

func FuzzDecodeStatusReply(f *testing.F) {
	fuzzDecoder(f, protocol.DecodeStatusReply, (*protocol.StatusReply).Validate)
}

// TestDecodeBatch_AgreesWithTheOldDecoderOnEveryDecodersSeeds runs the
// differential check of the one-pass batch decoder on the seeds of every
// decoder's fuzz target (messages of every kind, mostly refused as batches).
func TestDecodeBatch_AgreesWithTheOldDecoderOnEveryDecodersSeeds(t *testing.T) {
	for _, s := range seeds {
		if d := protocol.DiffBatchDecoders([]byte(s), 1<<20); d != "" {
			t.Errorf("seed %q: %s", s, d)
		}
	}
}
