package workload

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
)

// referenceTraces are the reproduce traces of spec §1 with the counts of
// its table.
var referenceTraces = []struct {
	file       string
	thr        string
	jobs       int
	modes      [3]int // gns, accordion, static
	sf         [4]int // 1, 2, 4, 8
	lastArrive float64
}{
	{"120jobs-32gpus.trace", "tacc", 120, [3]int{57, 59, 4}, [4]int{92, 20, 8, 0}, 5011},
	{"220jobs-64gpus.trace", "wisr", 220, [3]int{107, 106, 7}, [4]int{160, 49, 9, 2}, 5956},
	{"460jobs-128gpus.trace", "wisr", 460, [3]int{227, 214, 19}, [4]int{310, 106, 40, 4}, 4749},
	{"900jobs-256gpus.trace", "wisr", 900, [3]int{419, 454, 27}, [4]int{617, 208, 63, 12}, 4400},
	{"900jobs-256gpus-alt.trace", "wisr", 900, [3]int{419, 448, 33}, [4]int{617, 208, 63, 12}, 4400},
}

func readReference(t *testing.T, file string) []Spec {
	t.Helper()
	specs, err := ReadTraceFile(filepath.Join(shareddata.Dir(t), "shockwave-traces", file))
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func TestParseTrace_ReferenceTracesHaveTheSpecCounts(t *testing.T) {
	for _, rt := range referenceTraces {
		specs := readReference(t, rt.file)
		var modes [3]int
		var sf [4]int
		types := map[string]bool{}
		for i, sp := range specs {
			if sp.ID != i {
				t.Fatalf("%s: job %d has id %d", rt.file, i, sp.ID)
			}
			switch sp.Mode {
			case GNS:
				modes[0]++
			case Accordion:
				modes[1]++
			case Static:
				modes[2]++
			}
			switch sp.ScaleFactor {
			case 1, 2, 4, 8:
				sf[map[int]int{1: 0, 2: 1, 4: 2, 8: 3}[sp.ScaleFactor]]++
			default:
				t.Errorf("%s: job %d has sf %d", rt.file, i, sp.ScaleFactor)
			}
			if sp.Model == Recommendation && sp.ScaleFactor != 1 {
				t.Errorf("%s: job %d is a distributed Recommendation job", rt.file, i)
			}
			if sp.PriorityWeight != 1 || sp.SLO != -1 || !sp.NeedsDataDir {
				t.Errorf("%s: job %d: priority %v, SLO %v, needs_data_dir %v", rt.file, i, sp.PriorityWeight, sp.SLO, sp.NeedsDataDir)
			}
			types[sp.JobType] = true
		}
		if len(specs) != rt.jobs || modes != rt.modes || sf != rt.sf {
			t.Errorf("%s: %d jobs, modes gns/acc/static %v, sf %v; want %d, %v, %v", rt.file, len(specs), modes, sf, rt.jobs, rt.modes, rt.sf)
		}
		if specs[0].Arrival != 0 || specs[len(specs)-1].Arrival != rt.lastArrive {
			t.Errorf("%s: arrivals %v..%v, want 0..%v", rt.file, specs[0].Arrival, specs[len(specs)-1].Arrival, rt.lastArrive)
		}
		if len(types) != 21 {
			t.Errorf("%s: %d job types, want 21", rt.file, len(types))
		}
	}
}

// TestParseTrace_TotalStepsAreDurationTimesThroughput checks spec §1 field
// 6: every line's total_steps is floor(duration × thr(job_type, sf)) of the
// table the trace goes with, to ±1 step.
func TestParseTrace_TotalStepsAreDurationTimesThroughput(t *testing.T) {
	for _, rt := range referenceTraces {
		thr, err := Builtin(rt.thr)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range readReference(t, rt.file) {
			v, ok := thr.Lookup(sp.JobType, sp.ScaleFactor)
			want := math.Floor(sp.Duration * v)
			if !ok || math.Abs(float64(sp.TotalSteps)-want) > 1 {
				t.Errorf("%s: job %d: total_steps %d, floor(%v × %v) = %v", rt.file, sp.ID, sp.TotalSteps, sp.Duration, v, want)
			}
		}
	}
}

func TestWriteTrace_RoundTripsTheReferenceTracesByteForByte(t *testing.T) {
	for _, rt := range referenceTraces {
		path := filepath.Join(shareddata.Dir(t), "shockwave-traces", rt.file)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		specs, err := ParseTrace(bytes.NewReader(orig), rt.file)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := WriteTrace(&out, specs); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), orig) {
			t.Errorf("%s: written trace differs from the original", rt.file)
		}
	}
}

const goodLine = "ResNet-50 (batch size 32)\tpython3 main.py -j 4 -a resnet50 -b 32 %s/imagenet/\timage_classification/imagenet\t--num_minibatches\t1\t29992\t1\taccordion\t1\t-1.000000\t5084\t1655"

func TestParseTrace_ReadsEveryField(t *testing.T) {
	specs, err := ParseTrace(strings.NewReader(goodLine+"\r\n"+goodLine+"\n\n\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{
		ID: 1, JobType: "ResNet-50 (batch size 32)", Model: ResNet50, BatchSize: 32,
		Command: "python3 main.py -j 4 -a resnet50 -b 32 %s/imagenet/", WorkingDir: "image_classification/imagenet",
		NumStepsArg: "--num_minibatches", NeedsDataDir: true, TotalSteps: 29992, ScaleFactor: 1,
		Mode: Accordion, PriorityWeight: 1, SLO: -1, Duration: 5084, Arrival: 1655,
	}
	if len(specs) != 2 || specs[1] != want {
		t.Fatalf("got %+v\nwant %+v", specs, want)
	}
}

// withField returns goodLine with field i (1-based) replaced.
func withField(i int, v string) string {
	f := strings.Split(goodLine, "\t")
	f[i-1] = v
	return strings.Join(f, "\t")
}

func TestParseTrace_ErrorsNameFileLineAndField(t *testing.T) {
	cases := []struct {
		trace, want string
	}{
		{withField(6, "abc"), `trace.txt:1: field 6 (total_steps): "abc" is not an integer`},
		{goodLine + "\n" + withField(6, "-5"), `trace.txt:2: field 6 (total_steps): -5 is not positive`},
		{withField(6, "0"), `trace.txt:1: field 6 (total_steps): 0 is not positive`},
		{withField(6, "12.0"), `trace.txt:1: field 6 (total_steps): "12.0" is not an integer`},
		{"a\tb", `trace.txt:1: has 2 TAB-separated fields, want 12`},
		{goodLine + "\tx", `trace.txt:1: has 13 TAB-separated fields, want 12`},
		{withField(1, "CycleGAN (batch size 1)"), `trace.txt:1: field 1 (job_type): unknown model "CycleGAN"`},
		{withField(1, "ResNet-50"), `trace.txt:1: field 1 (job_type): "ResNet-50" is not of the form`},
		{withField(5, "yes"), `trace.txt:1: field 5 (needs_data_dir): "yes" is not 0 or 1`},
		{withField(7, "0"), `trace.txt:1: field 7 (scale_factor): 0 GPUs: the scale factor must be at least 1`},
		{withField(7, "two"), `trace.txt:1: field 7 (scale_factor): "two" is not an integer`},
		{withField(8, "elastic"), `trace.txt:1: field 8 (mode): unknown mode "elastic"`},
		{withField(9, "0"), `trace.txt:1: field 9 (priority_weight): 0 must be positive`},
		{withField(10, "none"), `trace.txt:1: field 10 (SLO): "none" is not a number`},
		{withField(11, "NaN"), `trace.txt:1: field 11 (duration): "NaN" is not finite`},
		{withField(11, "-1"), `trace.txt:1: field 11 (duration): -1 must not be negative`},
		{withField(12, "+Inf"), `trace.txt:1: field 12 (arrival_time): "+Inf" is not finite`},
		{goodLine + "\n" + withField(12, "1654"), `trace.txt:2: field 12 (arrival_time): 1654 is before the previous job's arrival 1655`},
		{goodLine + "\n\n" + goodLine, `trace.txt:2: blank line between jobs`},
		{"", `trace.txt: no jobs`},
		{"\n\n", `trace.txt: no jobs`},
	}
	for _, c := range cases {
		_, err := ParseTrace(strings.NewReader(c.trace), "trace.txt")
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("trace %q:\n got error %v\nwant prefix %s", c.trace, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error spans lines: %q", err)
		}
	}
}

func TestParseTrace_AcceptsAnyPositiveScaleFactor(t *testing.T) {
	specs, err := ParseTrace(strings.NewReader(withField(7, "3")), "t")
	if err != nil || specs[0].ScaleFactor != 3 {
		t.Fatalf("got %v, %v", specs, err)
	}
}

func TestWriteTrace_RoundTripsFractionalValues(t *testing.T) {
	sp := Spec{JobType: "LM (batch size 5)", Model: LM, BatchSize: 5, Command: "c", WorkingDir: "w", NumStepsArg: "-n",
		TotalSteps: 7, ScaleFactor: 2, Mode: GNS, PriorityWeight: 0.25, SLO: 1.0 / 3, Duration: 12.5, Arrival: 1e-7}
	var b bytes.Buffer
	if err := WriteTrace(&b, []Spec{sp}); err != nil {
		t.Fatal(err)
	}
	back, err := ParseTrace(&b, "t")
	if err != nil {
		t.Fatal(err)
	}
	if back[0] != sp {
		t.Errorf("got %+v\nwant %+v", back[0], sp)
	}
}

func TestWriteTrace_RefusesTabsInTextFields(t *testing.T) {
	sp := Spec{JobType: "LM (batch size 5)", Command: "a\tb", Mode: GNS}
	if err := WriteTrace(&bytes.Buffer{}, []Spec{sp}); err == nil || !strings.Contains(err.Error(), "field 2 (command)") {
		t.Errorf("got %v", err)
	}
}

func TestReadTraceFile_MissingFileIsAnError(t *testing.T) {
	if _, err := ReadTraceFile(filepath.Join(t.TempDir(), "x.trace")); err == nil {
		t.Error("no error")
	}
}
