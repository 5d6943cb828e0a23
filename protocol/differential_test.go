package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The one-pass DecodeBatch against the decoder it replaced (oracle_test.go):
// on every input both accept with identical values, or both refuse with the
// identical error (same text, same reason, same error type).

// diffBatchDecoders returns "" when both decoders agree on data, else what
// differs.
func diffBatchDecoders(data []byte, limit int) string {
	want, werr := oracleDecodeBatch(data, limit)
	got, gerr := decodeBatch(data, limit)
	switch {
	case (werr == nil) != (gerr == nil):
		return fmt.Sprintf("oracle error %v, new error %v", werr, gerr)
	case werr != nil:
		if werr.Error() != gerr.Error() || Reason(werr) != Reason(gerr) ||
			reflect.TypeOf(werr) != reflect.TypeOf(gerr) || errors.Is(gerr, ErrInvalid) != errors.Is(werr, ErrInvalid) {
			return fmt.Sprintf("errors differ:\noracle %T %q\nnew    %T %q", werr, werr, gerr, gerr)
		}
		if got != nil {
			return "an error with a value"
		}
	default:
		// %#v tells -0 from 0, which DeepEqual does not.
		if !reflect.DeepEqual(want, got) || fmt.Sprintf("%#v", *want) != fmt.Sprintf("%#v", *got) {
			return fmt.Sprintf("values differ:\noracle %#v\nnew    %#v", *want, *got)
		}
	}
	return ""
}

// batchCorpus are valid batches, the seeds of the mutation sweep.
var batchCorpus = []string{
	`{"v":1,"job":"j1","events":[` +
		`{"v":1,"type":"progress","job":"j1","seq":1,"steps":10,"elapsed":1.5,"steps_done":10,"total_steps":1000,"epoch":0,"batch_size":32,"throughput":6.6},` +
		`{"v":1,"type":"done","job":"j1","seq":2,"steps_done":1000,"total_steps":1000,"epoch":3,"batch_size":32}]}`,
	`{"v":1,"job":"job-004217","events":[{"v":1,"type":"batch_size","job":"job-004217","seq":9007199254740992,"steps_done":0,"total_steps":1125899906842624,"epoch":1048576,"batch_size":16777216,"elapsed":0,"throughput":1e9}]}`,
	" \t\r\n{ \"events\" : [ { \"throughput\" : 0.000001 , \"batch_size\" : 1 , \"epoch\" : 0 , \"total_steps\" : 1 , \"steps_done\" : 0 , \"elapsed\" : 1E-7 , \"steps\" : 0 , \"seq\" : 1 , \"job\" : \"a_-Z9\" , \"type\" : \"progress\" , \"v\" : 1 } ] , \"job\" : \"a_-Z9\" , \"v\" : 1 } \n",
	`{"v":1,"job":"\u006a1","events":[{"v":1,"type":"prog\u0072ess","job":"j1","seq":1,"steps":null,"elapsed":-0,"steps_done":0,"total_steps":1,"epoch":0,"batch_size":1,"throughput":1.0e+2}]}`,
}

// hostile are inputs the sweep would not reach by small edits.
var hostile = []string{
	``, ` `, `null`, `true`, `1`, `-`, `"v"`, `[]`, `{}`, `{"v":1}`, `{"V":1,"job":"j"}`, `{"v":2,"job":"j","bogus":[}`,
	`{"v":1,"v":2}`, `{"v":1,"V":2}`, `{"v":1,"v":null}`, `{"v":null}`, `{"v":{"a":1,"a":2}}`, `{"v":"1"}`, `{"v":1.0}`,
	`{"v": 1 ,"job":"j","events":[]}`, `{"v":1,"job":"j","events":null}`, `{"v":1,"job":"j","events":{}}`,
	`{"v":1,"job":"j","events":[null]}`, `{"v":1,"job":"j","events":[1,"x",true,[{"a":1,"a":1}]]}`,
	`{"v":1,"job":"j","events":[{"seq":-1,"epoch":1.5,"steps":1e3,"elapsed":1e400,"type":7,"job":false}]}`,
	`{"v":1,"job":{"x":{"":{"a":1,"a":2}}}}`, `{"v":1,"job":{"[]":{"a":1,"a":2}}}`, `{"v":1,"JOB":"j","Job":"k"}`,
	`{"v":1,"job":"j","events":[{"v":1,"Seq":1,"ſeq":2}]}`, `{"v":1,"\u0056":1}`, `{"\u0076":1}`,
	`{"v":1,"job":"\ud800x\xff","events":[]}`, `{"v":1,"job":"` + "\x01" + `"}`, `{"v":1,"job":"\x"}`, `{"v":1,"job":"\u12"}`,
	`{"v":1,"job":"j","events":[{"v":1,"type":"done","job":"j","seq":18446744073709551615}]}`,
	`{"v":1,"job":"j","events":[{"v":1,"type":"done","job":"j","seq":18446744073709551616,"epoch":9223372036854775808}]}`,
	`{"v":1,"job":"j","events":[{"v":1,"type":"done","job":"j","seq":1,"epoch":-9223372036854775808,"steps":-9223372036854775809}]}`,
	`{"v":1} {}`, `{"v":1}x`, `{"v":1}]`, `{"v":1,}`, `{"v":1 "job":"j"}`, `{"v" 1}`, `{,}`, `{"v":01}`, `{"v":1.}`, `{"v":1e}`, `{"v":1e+}`,
	`{"v":tru}`, `{"v":nul`, `{"v":fals}`, `{"v":-}`, `{"v":[1,]}`, `[1,]`, `{"v":1,"job":"j","events":[{"a":1},]}`, "\xef\xbb\xbf{}",
	strings.Repeat("[", 10001), strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	`{"v":1,"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"v":1,"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	`{"v":1,"x":` + strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000) + `}`,
	`{"v":1,"job":"j","events":[{"v":1,"elapsed":` + strings.Repeat("9", 400) + `}]}`,
	`{"v":1,"job":"j","events":[{"v":1,"seq":` + strings.Repeat("9", 1000) + `}]}`,
	`{"v":1,"job":"` + strings.Repeat("x", 200_000) + `","events":[]}`,
	`{"v":1,"x":{` + strings.Repeat(`"k":0,`, 30_000) + `"k":0}}`,
}

func TestDecodeBatch_AgreesWithTheOldDecoderOnCorpusAndHostileInputs(t *testing.T) {
	for _, in := range append(append([]string{}, batchCorpus...), hostile...) {
		if d := diffBatchDecoders([]byte(in), 1<<20); d != "" {
			t.Errorf("input %.200q: %s", in, d)
		}
	}
	for _, s := range batchCorpus {
		if _, err := decodeBatch([]byte(s), 0); err != nil {
			t.Errorf("corpus batch %s refused: %v", s, err)
		}
	}
}

// mutations returns single-byte edits of s: every truncation, and at every
// position the deletion of the byte, and the insertion of and replacement
// by each byte of a set that matters to JSON.
func mutations(s string, visit func(string)) {
	const set = "{}[],:\"\\ 0-1.eE+truefalsnl\x00\x1fvVé\xff"
	for i := 0; i <= len(s); i++ {
		visit(s[:i])
		if i == len(s) {
			break
		}
		visit(s[:i] + s[i+1:])
		for k := 0; k < len(set); k++ {
			visit(s[:i] + set[k:k+1] + s[i:])
			visit(s[:i] + set[k:k+1] + s[i+1:])
		}
	}
}

func TestDecodeBatch_AgreesWithTheOldDecoderOnEverySingleByteEdit(t *testing.T) {
	n, bad := 0, 0
	for _, s := range batchCorpus {
		mutations(s, func(m string) {
			n++
			if d := diffBatchDecoders([]byte(m), 0); d != "" && bad < 20 {
				bad++
				t.Errorf("input %q: %s", m, d)
			}
		})
	}
	t.Logf("%d inputs", n)
}

// FuzzDecodeBatchDifferential is the same comparison on fuzzed inputs;
// `go test ./protocol -run '^$' -fuzz FuzzDecodeBatchDifferential`.
func FuzzDecodeBatchDifferential(f *testing.F) {
	for _, s := range append(append([]string{}, batchCorpus...), hostile...) {
		if len(s) < 4096 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if d := diffBatchDecoders(data, 1<<20); d != "" {
			t.Fatal(d)
		}
	})
}

func TestDecodeBatch_RefusesWhatTheOldDecoderRefusedForTheSameReason(t *testing.T) {
	// Named claims, readable on their own (the sweep covers the rest).
	for _, c := range []struct{ in, mention string }{
		{`{"v":1,"job":"j","events":[{"v":1,"seq":1,"seq":2}]}`, `duplicate field "events[].seq"`},
		{`{"v":1,"job":"j","events":[{"v":1,"Seq":1}]}`, `did you mean "seq"?`},
		{`{"v":1,"job":"j","events":[{"v":1,"seq":-1}]}`, `field "events.seq": number -1 is not a uint64`},
		{`{"v":2,"nope":1}`, `unsupported schema version 2`},
		{`{"v":1,"job":"j","events":[]} x`, `invalid character 'x' after top-level value`},
		{`{"v":1,"job":"j","events":[{"elapsed":NaN}]}`, `invalid character 'N' looking for beginning of value`},
		{strings.Repeat("[", 10001), `exceeded max depth`},
	} {
		_, err := decodeBatch([]byte(c.in), 0)
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%.80s: error %v, want one mentioning %q", c.in, err, c.mention)
		}
		if d := diffBatchDecoders([]byte(c.in), 0); d != "" {
			t.Errorf("%.80s: %s", c.in, d)
		}
	}
}

// The SDK's own encoding of random batches decodes to the batch encoded.
func TestDecodeBatch_RoundTripsWhatJSONMarshalWrites(t *testing.T) {
	b := Batch{V: Version, Job: "j", Events: []Event{{V: 1, Type: EventProgress, Job: "j", Seq: 1, Steps: 3, Elapsed: 0.1 + 0.2,
		StepsDone: 3, TotalSteps: 9, BatchSize: 8, Throughput: 1.0 / 3}}}
	for i := range 200 {
		e := b.Events[0]
		e.Seq, e.Elapsed, e.Throughput = uint64(i+2), float64(i)*1.0000001e-3, float64(i*i)/7
		b.Events = append(b.Events, e)
	}
	data, _ := json.Marshal(&b)
	got, err := decodeBatch(data, 0)
	if err != nil || !reflect.DeepEqual(*got, b) {
		t.Fatalf("round trip: %v", err)
	}
	if d := diffBatchDecoders(data, 0); d != "" {
		t.Fatal(d)
	}
}

func TestIsToken_MatchesTheRegexpItReplaced(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	check := func(s string) {
		if isToken(s) != re.MatchString(s) {
			t.Fatalf("isToken(%q) = %v, the regexp says %v", s, isToken(s), re.MatchString(s))
		}
	}
	check("")
	for a := range 256 {
		check(string(rune(a)))
		check(string([]byte{byte(a)}))
		for b := range 256 {
			check(string([]byte{byte(a), byte(b)}))
		}
	}
	for _, s := range []string{"job-1_A", "job-1\n", "a b", "é", "x\x00", "-_-", strings.Repeat("z", 300)} {
		check(s)
	}
}

// Decoders run on several goroutines at once (the coordinator's log reader
// and its replay): the one-pass decoder shares no mutable state. Meaningful
// under -race.
func TestDecodeBatch_IsSafeForConcurrentUse(t *testing.T) {
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for _, s := range hostile[:40] {
				_, _ = decodeBatch([]byte(s), 0)
			}
			for _, s := range batchCorpus {
				if _, err := decodeBatch([]byte(s), 0); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
}
