package workload

import (
	"strings"
	"testing"
)

func TestIterationsPerEpoch_IsCeilOfDatasetOverBatch(t *testing.T) {
	cases := []struct {
		model string
		bs    int
		want  int
	}{
		{ResNet18, 32, 1563},       // 50000/32 = 1562.5
		{ResNet18, 256, 196},       // 195.3125
		{ResNet50, 32, 3125},       // exact
		{ResNet50, 128, 782},       // 781.25
		{Transformer, 64, 157},     // 156.25
		{LM, 5, 11935},             // exact
		{LM, 80, 746},              // 745.9375
		{Recommendation, 8192, 15}, // 14.39
		{Recommendation, 512, 231}, // 230.29
		{"CycleGAN", 1, 0},         // omitted model
		{ResNet18, 0, 0},           // no batch
	}
	for _, c := range cases {
		if got := IterationsPerEpoch(c.model, c.bs); got != c.want {
			t.Errorf("IterationsPerEpoch(%s, %d) = %d, want %d", c.model, c.bs, got, c.want)
		}
	}
}

func TestEpochs_CountsThePartialLastEpoch(t *testing.T) {
	cases := []struct {
		model string
		bs    int
		steps int64
		want  int
	}{
		{ResNet50, 32, 29992, 10}, // spec §2.4: job 35
		{ResNet50, 32, 3125, 1},
		{ResNet50, 32, 3126, 2},
		{ResNet50, 32, 1, 1},
		{ResNet50, 32, 0, 0},
	}
	for _, c := range cases {
		if got := Epochs(c.model, c.bs, c.steps); got != c.want {
			t.Errorf("Epochs(%s, %d, %d) = %d, want %d", c.model, c.bs, c.steps, got, c.want)
		}
	}
}

func TestParseJobType_RoundTripsEveryTemplate(t *testing.T) {
	for _, tp := range templates {
		jt := JobType(tp.model, tp.bs)
		m, bs, err := ParseJobType(jt)
		if err != nil || m != tp.model || bs != tp.bs {
			t.Errorf("ParseJobType(%q) = %q, %d, %v", jt, m, bs, err)
		}
	}
}

func TestParseJobType_RejectsMalformedTypesWithAReason(t *testing.T) {
	cases := map[string]string{
		"ResNet-18":                  "not of the form",
		"ResNet-18 (batch size 32":   "not of the form",
		"CycleGAN (batch size 1)":    "unknown model",
		"ResNet-18 (batch size 0)":   "not a positive integer",
		"ResNet-18 (batch size -8)":  "not a positive integer",
		"ResNet-18 (batch size 032)": "not a positive integer",
		"ResNet-18 (batch size x)":   "not a positive integer",
		"resnet-18 (batch size 32)":  "unknown model",
		"ResNet-18  (batch size 32)": "unknown model",
	}
	for in, want := range cases {
		_, _, err := ParseJobType(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseJobType(%q) error %v, want one containing %q", in, err, want)
		}
	}
}

func TestModelLimits_MatchSpec(t *testing.T) {
	want := map[string][3]int{ // D, bottom, top (spec §2.1, §2.5)
		ResNet18:       {50000, 16, 256},
		ResNet50:       {100000, 16, 128},
		Transformer:    {10000, 16, 128},
		LM:             {59675, 5, 80},
		Recommendation: {117907, 512, 8192},
	}
	if len(Models()) != len(want) {
		t.Fatalf("Models() = %v", Models())
	}
	for m, w := range want {
		if got := [3]int{DatasetSize(m), MinBatchSize(m), MaxBatchSize(m)}; got != w {
			t.Errorf("%s: got D, min, max = %v, want %v", m, got, w)
		}
	}
}

func TestCeilDiv_MatchesPythonCeilForNegatives(t *testing.T) {
	cases := [][3]int64{{7, 2, 4}, {6, 2, 3}, {0, 5, 0}, {-7, 2, -3}, {-6, 2, -3}, {1, 3125, 1}}
	for _, c := range cases {
		if got := ceilDiv(c[0], c[1]); got != c[2] {
			t.Errorf("ceilDiv(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
