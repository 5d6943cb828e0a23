package workload

import (
	"fmt"
	"strconv"
	"strings"
)

// Model names (spec §1 field 1, §2.1).
const (
	ResNet18       = "ResNet-18"
	ResNet50       = "ResNet-50"
	Transformer    = "Transformer"
	LM             = "LM"
	Recommendation = "Recommendation"
)

// ModelInfo holds the constants of one model family.
type ModelInfo struct {
	Name string
	// DatasetSize is the number of samples per epoch (spec §2.1).
	DatasetSize int
	// MinBatchSize and MaxBatchSize are the "bottom" and "top" batch sizes
	// of the run-time adaptation (spec §2.5). MaxBatchSize is also the cap
	// of the gns schedules (§2.3) and the large batch size Bmax of Accordion.
	MinBatchSize, MaxBatchSize int
}

// models lists the five model families of the traces (spec §2.1, §2.3,
// §2.5). CycleGAN (6287 samples) and A3C (4) appear in the original's tables
// but in no trace, and are omitted.
var models = []ModelInfo{
	{Name: ResNet18, DatasetSize: 50000, MinBatchSize: 16, MaxBatchSize: 256},          // CIFAR-10
	{Name: ResNet50, DatasetSize: 100000, MinBatchSize: 16, MaxBatchSize: 128},         // ImageNet subset
	{Name: Transformer, DatasetSize: 10000, MinBatchSize: 16, MaxBatchSize: 128},       // Multi30k
	{Name: LM, DatasetSize: 59675, MinBatchSize: 5, MaxBatchSize: 80},                  // Wikitext-2
	{Name: Recommendation, DatasetSize: 117907, MinBatchSize: 512, MaxBatchSize: 8192}, // ML-20M
}

// Models returns the known model names in a fixed order.
func Models() []string {
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = m.Name
	}
	return out
}

// LookupModel returns the constants of a model family.
func LookupModel(name string) (ModelInfo, bool) {
	for _, m := range models {
		if m.Name == name {
			return m, true
		}
	}
	return ModelInfo{}, false
}

// DatasetSize returns the samples per epoch of a model (spec §2.1), or 0
// for an unknown model.
func DatasetSize(model string) int {
	m, _ := LookupModel(model)
	return m.DatasetSize
}

// MaxBatchSize returns the model's top batch size (spec §2.5), or 0.
func MaxBatchSize(model string) int {
	m, _ := LookupModel(model)
	return m.MaxBatchSize
}

// MinBatchSize returns the model's bottom batch size (spec §2.5), or 0.
func MinBatchSize(model string) int {
	m, _ := LookupModel(model)
	return m.MinBatchSize
}

// IterationsPerEpoch is ceil(D_model / bs), the steps of one epoch at batch
// size bs (spec §2.1). It is 0 for an unknown model or bs < 1.
func IterationsPerEpoch(model string, bs int) int {
	d := DatasetSize(model)
	if d == 0 || bs < 1 {
		return 0
	}
	return int(ceilDiv(int64(d), int64(bs)))
}

// Epochs is the total epoch count of a job, E = ceil(total_steps /
// ceil(D_model / bs0)), where bs0 is the initial batch size (spec §2.1). The
// last epoch is usually partial but counts. It is 0 for an unknown model,
// bs0 < 1 or totalSteps ≤ 0.
func Epochs(model string, bs0 int, totalSteps int64) int {
	ipe := IterationsPerEpoch(model, bs0)
	if ipe == 0 || totalSteps <= 0 {
		return 0
	}
	return int(ceilDiv(totalSteps, int64(ipe)))
}

// JobType returns the job-type string "<Model> (batch size <bs>)" that keys
// the throughput tables (spec §1 field 1).
func JobType(model string, bs int) string {
	return model + " (batch size " + strconv.Itoa(bs) + ")"
}

// ParseJobType splits a job type "<Model> (batch size <bs>)" into its model
// and batch size (spec §1 field 1). The model must be one of Models and the
// batch size a positive integer.
func ParseJobType(s string) (model string, bs int, err error) {
	const mid = " (batch size "
	i := strings.Index(s, mid)
	if i < 0 || !strings.HasSuffix(s, ")") {
		return "", 0, fmt.Errorf("%q is not of the form \"<Model> (batch size <bs>)\"", s)
	}
	model = s[:i]
	if _, ok := LookupModel(model); !ok {
		return "", 0, fmt.Errorf("unknown model %q in %q (known: %s)", model, s, strings.Join(Models(), ", "))
	}
	num := s[i+len(mid) : len(s)-1]
	bs, err = strconv.Atoi(num)
	if err != nil || bs < 1 || strconv.Itoa(bs) != num {
		return "", 0, fmt.Errorf("batch size %q in %q is not a positive integer", num, s)
	}
	return model, bs, nil
}

// ceilDiv is the exact ceiling of a/b for b > 0, with Python's math.ceil
// meaning for negative a (toward +∞).
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}
