package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// GenerateOptions parameterises Generate. The zero value gives the
// parameters of the 120-job reproduce trace (spec §1: file name
// 120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01): durations from 0.2 to 5
// hours over 100 candidates, mean inter-arrival 40 s, modes (static,
// accordion, gns) = (0, 0.5, 0.5), scale factors (1, 2, 4, 8) = (0.6, 0.3,
// 0.09, 0.01). A zero field takes its default.
type GenerateOptions struct {
	MinDurationHours float64 // default 0.2
	MaxDurationHours float64 // default 5
	NumDurations     int     // duration candidates, default 100
	// MeanInterArrival is λ, the mean of the exponential inter-arrival
	// times in seconds, default 40.
	MeanInterArrival float64
	// ModeMix weighs static, accordion and gns; it need not sum to 1.
	ModeMix [3]float64
	// ScaleFactorMix weighs sf 1, 2, 4 and 8 for the templates that can be
	// distributed (all but Recommendation); it need not sum to 1.
	ScaleFactorMix [4]float64
}

// Generation constants (spec §1 "Arrival and generation process").
var (
	defaultModeMix        = [3]float64{0, 0.5, 0.5}
	defaultScaleFactorMix = [4]float64{0.6, 0.3, 0.09, 0.01}
	scaleFactors          = [4]int{1, 2, 4, 8}
	modes                 = [3]Mode{Static, Accordion, GNS}
	// Duration buckets: the first round(0.2n) candidates, then up to
	// round(0.5n), round(0.9n), and the rest, drawn with these weights.
	bucketEnds    = [4]float64{0.2, 0.5, 0.9, 1}
	bucketWeights = [4]float64{0.72, 0.20, 0.05, 0.03}
)

// accordionMinSeconds: a generated accordion job shorter than this becomes
// static (spec §1).
const accordionMinSeconds = 1000

// generatorStream is the second PCG word; the seed is the first.
const generatorStream = 0x5368_6f63_6b77_6176 // "Shockwav"

// template is one entry of the job-template table (spec §1).
type template struct {
	model string
	bs    int
}

// templates is the uniform 21-entry template table of spec §1.
var templates = func() []template {
	var out []template
	for _, m := range []struct {
		model string
		bs    []int
	}{
		{ResNet18, []int{32, 64, 128, 256}},
		{ResNet50, []int{16, 32, 64}},
		{Transformer, []int{16, 32, 64, 128}},
		{LM, []int{5, 10, 20, 40, 80}},
		{Recommendation, []int{512, 1024, 2048, 4096, 8192}},
	} {
		for _, bs := range m.bs {
			out = append(out, template{m.model, bs})
		}
	}
	return out
}()

// commandLine returns the physical-run fields of a model, as they appear in
// the original traces (spec §1 fields 2–4); %s stands for the data directory.
func commandLine(model string, bs int) (cmd, dir, stepsArg string) {
	b := strconv.Itoa(bs)
	switch model {
	case ResNet18:
		return "python3 main.py --data_dir=%s/cifar10 --batch_size " + b, "image_classification/cifar10", "--num_steps"
	case ResNet50:
		return "python3 main.py -j 4 -a resnet50 -b " + b + " %s/imagenet/", "image_classification/imagenet", "--num_minibatches"
	case Transformer:
		return "python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size " + b + " -proj_share_weight", "translation", "-step"
	case LM:
		return "python3 main.py --cuda --data %s/wikitext2 --batch_size " + b, "language_modeling", "--steps"
	case Recommendation:
		return "python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size " + b, "recommendation", "-n"
	}
	return "", "", ""
}

// withDefaults fills zero fields and checks the rest.
func (o GenerateOptions) withDefaults() (GenerateOptions, error) {
	if o.MinDurationHours == 0 {
		o.MinDurationHours = 0.2
	}
	if o.MaxDurationHours == 0 {
		o.MaxDurationHours = 5
	}
	if o.NumDurations == 0 {
		o.NumDurations = 100
	}
	if o.MeanInterArrival == 0 {
		o.MeanInterArrival = 40
	}
	if o.ModeMix == ([3]float64{}) {
		o.ModeMix = defaultModeMix
	}
	if o.ScaleFactorMix == ([4]float64{}) {
		o.ScaleFactorMix = defaultScaleFactorMix
	}
	switch {
	case !(o.MinDurationHours > 0) || math.IsInf(o.MinDurationHours, 0):
		return o, fmt.Errorf("minimum duration %v h must be positive", o.MinDurationHours)
	case !(o.MaxDurationHours >= o.MinDurationHours) || math.IsInf(o.MaxDurationHours, 0):
		return o, fmt.Errorf("maximum duration %v h must be finite and at least the minimum %v h", o.MaxDurationHours, o.MinDurationHours)
	case o.NumDurations < 1:
		return o, fmt.Errorf("number of duration candidates %d must be positive", o.NumDurations)
	case !(o.MeanInterArrival > 0) || math.IsInf(o.MeanInterArrival, 0):
		return o, fmt.Errorf("mean inter-arrival time %v s must be positive", o.MeanInterArrival)
	}
	if err := checkMix("mode mix", o.ModeMix[:]); err != nil {
		return o, err
	}
	return o, checkMix("scale-factor mix", o.ScaleFactorMix[:])
}

func checkMix(what string, w []float64) error {
	sum := 0.0
	for _, v := range w {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%s %v: weights must be finite and not negative", what, w)
		}
		sum += v
	}
	if sum == 0 {
		return fmt.Errorf("%s %v: weights sum to 0", what, w)
	}
	return nil
}

// pick draws an index with probability proportional to w.
func pick(rng *rand.Rand, w []float64) int {
	sum := 0.0
	for _, v := range w {
		sum += v
	}
	u := rng.Float64() * sum
	last := 0
	for i, v := range w {
		if v == 0 {
			continue
		}
		if u < v {
			return i
		}
		u -= v
		last = i
	}
	return last // rounding left u ≥ 0 past the end
}

// durationCandidates returns linspace(min, max, n) hours (numpy's rule: the
// last value is max exactly) split into the four buckets of spec §1.
func durationCandidates(o GenerateOptions) [4][]float64 {
	n := o.NumDurations
	vals := make([]float64, n)
	step := 0.0
	if n > 1 {
		step = (o.MaxDurationHours - o.MinDurationHours) / float64(n-1)
	}
	for i := range vals {
		vals[i] = o.MinDurationHours + float64(i)*step
	}
	if n > 1 {
		vals[n-1] = o.MaxDurationHours
	}
	var out [4][]float64
	lo := 0
	for k, f := range bucketEnds {
		hi := n
		if k < len(bucketEnds)-1 {
			hi = max(lo, min(n, int(math.RoundToEven(f*float64(n)))))
		}
		out[k] = vals[lo:hi]
		lo = hi
	}
	return out
}

// Generate draws a synthetic trace of n jobs with the process of the
// original's generator (spec §1 "Arrival and generation process"):
//   - arrivals: exponential inter-arrival times with mean λ
//     (−ln(1−U)·λ), the first job at 0, written truncated to integers;
//   - template: uniform over the 21 (model, batch size) templates;
//   - duration: one of linspace(min, max, NumDurations) hours, bucket
//     weights 0.72/0.20/0.05/0.03, uniform within the bucket (empty buckets,
//     possible for tiny NumDurations, are never chosen), round-half-even of
//     3600·hours seconds;
//   - scale factor: drawn from ScaleFactorMix for every template but
//     Recommendation, which always gets 1;
//   - mode: drawn from ModeMix; an accordion job shorter than 1000 s
//     becomes static;
//   - total_steps = floor(duration × thr(job_type, sf)), at least 1.
//
// The same seed and options give the same trace. It fails when the options
// are invalid or thr lacks a positive throughput for a drawn job.
func Generate(n int, seed uint64, thr *Throughputs, opt GenerateOptions) ([]Spec, error) {
	if n < 1 {
		return nil, fmt.Errorf("workload: generate: job count %d must be positive", n)
	}
	if thr == nil {
		return nil, errors.New("workload: generate: no throughput table")
	}
	o, err := opt.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("workload: generate: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, generatorStream))
	buckets := durationCandidates(o)
	var bw [4]float64
	for k := range buckets {
		if len(buckets[k]) > 0 {
			bw[k] = bucketWeights[k]
		}
	}
	specs := make([]Spec, n)
	t := 0.0
	for i := range specs {
		if i > 0 {
			t += -math.Log(1-rng.Float64()) * o.MeanInterArrival
		}
		tp := templates[rng.IntN(len(templates))]
		b := buckets[pick(rng, bw[:])]
		hours := b[rng.IntN(len(b))]
		duration := math.RoundToEven(3600 * hours)
		sf := scaleFactors[pick(rng, o.ScaleFactorMix[:])]
		if tp.model == Recommendation {
			sf = 1
		}
		mode := modes[pick(rng, o.ModeMix[:])]
		if mode == Accordion && duration < accordionMinSeconds {
			mode = Static
		}
		jt := JobType(tp.model, tp.bs)
		v, err := thr.positive(jt, sf)
		if err != nil {
			return nil, fmt.Errorf("workload: generate: job %d: %v", i, err)
		}
		cmd, dir, arg := commandLine(tp.model, tp.bs)
		specs[i] = Spec{
			ID: i, JobType: jt, Model: tp.model, BatchSize: tp.bs,
			Command: cmd, WorkingDir: dir, NumStepsArg: arg, NeedsDataDir: true,
			TotalSteps: max(1, int64(math.Floor(duration*v))), ScaleFactor: sf, Mode: mode,
			PriorityWeight: 1, SLO: -1, Duration: duration, Arrival: math.Trunc(t),
		}
	}
	return specs, nil
}
