package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

func TestDecoders_FieldNamesAreCaseSensitive(t *testing.T) {
	for _, data := range []string{
		strings.Replace(goodRegister, `"workers"`, `"Workers"`, 1),
		strings.Replace(goodRegister, `"job"`, `"JOB"`, 1),
		strings.Replace(goodBatch, `"steps_done":10`, `"Steps_Done":10`, 1),
	} {
		var err error
		if strings.Contains(data, "events") {
			_, err = protocol.DecodeBatch([]byte(data), 0)
		} else {
			_, err = protocol.DecodeRegister([]byte(data), 0)
		}
		if err == nil || !strings.Contains(err.Error(), "case-sensitive") || protocol.Reason(err) != "malformed" {
			t.Errorf("%s: %v", data, err)
		}
	}
}

func TestDecoders_DuplicateKeysAreRefused(t *testing.T) {
	cases := map[string]string{
		"top level":        strings.Replace(goodRegister, `"workers":2`, `"workers":2,"workers":4096`, 1),
		"version twice":    strings.Replace(goodRegister, `"v":1`, `"v":1,"v":1`, 1),
		"inside an event":  strings.Replace(goodBatch, `"seq":1`, `"seq":1,"seq":7`, 1),
		"inside schedule":  strings.Replace(goodRegister, `}`, `,"schedule":{"batch_sizes":[32],"batch_sizes":[64]}}`, 1),
		"job id in events": strings.Replace(goodBatch, `"job":"j1","events"`, `"job":"j1","job":"j2","events"`, 1),
	}
	for name, data := range cases {
		var err error
		if strings.Contains(data, "events") {
			_, err = protocol.DecodeBatch([]byte(data), 0)
		} else {
			_, err = protocol.DecodeRegister([]byte(data), 0)
		}
		if err == nil || !strings.Contains(err.Error(), "duplicate field") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDecodeBatch_AbsurdSequenceNumbersAreRefused(t *testing.T) {
	for _, seq := range []string{"18446744073709551615", "9007199254740993"} {
		_, err := protocol.DecodeBatch([]byte(strings.Replace(goodBatch, `"seq":1,`, `"seq":`+seq+`,`, 1)), 0)
		if err == nil || !strings.Contains(err.Error(), "seq") {
			t.Errorf("seq %s: %v", seq, err)
		}
	}
	if _, err := protocol.DecodeBatch([]byte(strings.Replace(goodBatch, `"seq":2`, `"seq":9007199254740992`, 1)), 0); err != nil {
		t.Errorf("seq 2^53: %v", err)
	}
}

func TestDecodeStrictJSON_RefusesWhatEncodingJSONAccepts(t *testing.T) {
	var v struct {
		A int `json:"a"`
		B struct {
			C []int `json:"c"`
		} `json:"b"`
		M map[string]int `json:"m"`
	}
	for _, bad := range []string{`{"A":1}`, `{"a":1,"a":2}`, `{"b":{"C":[1]}}`, `{"m":{"x":1,"x":2}}`, `{"a":1} {}`, `{"z":1}`} {
		if err := protocol.DecodeStrictJSON([]byte(bad), &v); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	if err := protocol.DecodeStrictJSON([]byte(`{"a":1,"b":{"c":[1,2]},"m":{"x":1,"y":2}}`), &v); err != nil {
		t.Errorf("refused a good object: %v", err)
	}
}

// BenchmarkDecodeBatch measures the strict decoder on a two-event batch
// (key check, decode, validation); BenchmarkDecodeBatch_EncodingJSONOnly is
// plain encoding/json on the same bytes, for the cost of strictness.
func BenchmarkDecodeBatch(b *testing.B) {
	data := []byte(goodBatch)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := protocol.DecodeBatch(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBatch_EncodingJSONOnly(b *testing.B) {
	data := []byte(goodBatch)
	b.ReportAllocs()
	for b.Loop() {
		var v protocol.Batch
		if err := json.Unmarshal(data, &v); err != nil {
			b.Fatal(err)
		}
	}
}
