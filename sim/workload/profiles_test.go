package workload

import (
	"bytes"
	"strings"
	"testing"
)

const goodProfile = `{"v":1,"job_type":"LM (batch size 20)","scale_factor":1,"mode":"gns","priority":1,"arrival_s":0,"total_steps":5970,"batch_sizes":[20,20,40],"throughputs":[50.5,50,31.25]}
{"v":1,"job_type":"ResNet-18 (batch size 64)","scale_factor":2,"mode":"static","priority":2,"arrival_s":10.5,"total_steps":782,"batch_sizes":[64],"throughputs":[12]}
`

func TestProfiles_RoundTripIsByteIdentical(t *testing.T) {
	specs, err := ReadProfiles(strings.NewReader(goodProfile), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[1].ID != 1 || specs[1].Model != ResNet18 || specs[1].BatchSize != 64 || specs[0].Profile.Throughputs[2] != 31.25 {
		t.Fatalf("read %+v", specs)
	}
	var buf bytes.Buffer
	if err := WriteProfiles(&buf, specs); err != nil {
		t.Fatal(err)
	}
	if buf.String() != goodProfile {
		t.Fatalf("written back:\n%s\nwant:\n%s", buf.String(), goodProfile)
	}
}

func TestProfiles_BadLinesNameTheLineAndField(t *testing.T) {
	line := `{"v":1,"job_type":"LM (batch size 20)","scale_factor":1,"mode":"gns","priority":1,"arrival_s":0,"total_steps":5970,"batch_sizes":[20,20,40],"throughputs":[50.5,50,31.25]}`
	cases := map[string]string{
		"unknown field":        strings.Replace(line, `"v":1`, `"v":1,"x":2`, 1),
		"version":              strings.Replace(line, `"v":1`, `"v":2`, 1),
		"job_type":             strings.Replace(line, `LM (batch size 20)`, `GPT (batch size 20)`, 1),
		"mode":                 strings.Replace(line, `"gns"`, `"fast"`, 1),
		"scale_factor":         strings.Replace(line, `"scale_factor":1`, `"scale_factor":0`, 1),
		"priority":             strings.Replace(line, `"priority":1`, `"priority":-1`, 1),
		"arrival_s":            strings.Replace(line, `"arrival_s":0`, `"arrival_s":-3`, 1),
		"total_steps":          strings.Replace(line, `"total_steps":5970`, `"total_steps":0`, 1),
		"field batch_sizes":    strings.Replace(line, `[20,20,40]`, `[20,40]`, 1),
		"field throughputs":    strings.Replace(line, `[50.5,50,31.25]`, `[50.5,0,31.25]`, 1),
		"epoch 0 at":           strings.Replace(line, `[20,20,40]`, `[40,20,40]`, 1),
		"trailing data":        line + ` {}`,
		"wrong type":           strings.Replace(line, `"priority":1`, `"priority":"1"`, 1),
		"before the previous":  strings.Replace(line, `"arrival_s":0`, `"arrival_s":5`, 1) + "\n" + line,
		"blank line between":   line + "\n\n" + line,
		"throughputs: epoch 2": strings.Replace(line, `31.25]`, `1e300]`, 1),
	}
	for want, text := range cases {
		_, err := ReadProfiles(strings.NewReader(text), "p.jsonl")
		if err == nil || !strings.Contains(err.Error(), "p.jsonl:") {
			t.Errorf("%s: error %v", want, err)
			continue
		}
		key := want
		if key == "wrong type" || key == "unknown field" {
			key = "not a profile object"
		}
		if key == "job_type" || key == "mode" || key == "scale_factor" || key == "priority" || key == "arrival_s" || key == "total_steps" || key == "version" {
			key = "field "
		}
		if !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %q does not say %q", want, err, key)
		}
	}
}

// TestProfiles_StateFollowsTheProfile checks that a profiled job runs
// each epoch at its profile's throughput and switches batch size where
// its profile does.
func TestProfiles_StateFollowsTheProfile(t *testing.T) {
	specs, err := ReadProfiles(strings.NewReader(goodProfile), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	sp := specs[0]
	st, err := NewState(sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	var thr []float64
	var bs []int
	for st.Done < st.TotalSteps {
		st.SetFlags(sp)
		if st.Grow || st.Shrink {
			st.Rescale(sp, nil)
			st.SetFlags(sp)
		}
		thr, bs = append(thr, st.Throughput), append(bs, st.BatchSize)
		st.Done += int64(IterationsPerEpoch(LM, st.BatchSize))
	}
	if len(bs) != 3 || bs[0] != 20 || bs[1] != 20 || bs[2] != 40 || thr[0] != 50.5 || thr[1] != 50 || thr[2] != 31.25 {
		t.Fatalf("ran batch sizes %v at %v", bs, thr)
	}
	p, err := NewProfile(sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := 59675.0/20/50.5 + 59675.0/20/50 + 59675.0/40/31.25
	if d := p.IsolatedSeconds - want; d > 1e-9 || d < -1e-9 {
		t.Fatalf("isolated seconds %g, want %g", p.IsolatedSeconds, want)
	}
}
