package workload

// segment multiplies the batch size by mult over epochs [start, end); end 0
// means "to the last epoch" (→E in spec §2.3).
type segment struct{ start, end, mult int }

type gnsKey struct {
	model   string
	bs0, sf int
}

// gnsSegments is the gns schedule table of spec §2.3: per (model, bs0, sf),
// the epochs at which the batch size is bs0 times a multiplier. Every other
// combination (Transformer, any sf=8, ResNet-50 bs16, ResNet-50 bs32 on one
// GPU, ResNet-18 bs256, LM bs80, Recommendation bs8192, ...) keeps bs0.
var gnsSegments = map[gnsKey][]segment{
	{ResNet18, 16, 1}:  {{31, 41, 2}, {41, 51, 4}, {51, 71, 8}, {71, 0, 16}},
	{ResNet18, 32, 1}:  {{21, 31, 2}, {31, 51, 4}, {51, 0, 8}},
	{ResNet18, 64, 1}:  {{11, 31, 2}, {31, 0, 4}},
	{ResNet18, 128, 1}: {{11, 0, 2}},
	{ResNet18, 16, 2}:  {{21, 31, 2}, {31, 91, 4}, {91, 111, 8}, {111, 0, 16}},
	{ResNet18, 32, 2}:  {{11, 21, 2}, {21, 41, 4}, {41, 0, 8}},
	{ResNet18, 64, 2}:  {{21, 41, 2}, {41, 0, 4}},
	{ResNet18, 128, 2}: {{41, 0, 2}},
	{ResNet18, 16, 4}:  {{11, 21, 2}, {21, 81, 4}, {81, 91, 8}, {91, 0, 16}},
	{ResNet18, 32, 4}:  {{21, 31, 2}, {31, 61, 4}, {61, 0, 8}},
	{ResNet18, 64, 4}:  {{11, 61, 2}, {61, 0, 4}},
	{ResNet18, 128, 4}: {{11, 0, 2}},

	{ResNet50, 64, 1}: {{101, 0, 2}},
	{ResNet50, 32, 2}: {{101, 111, 2}, {111, 0, 4}},
	{ResNet50, 64, 2}: {{81, 0, 2}},
	{ResNet50, 32, 4}: {{131, 221, 2}, {221, 0, 4}},
	{ResNet50, 64, 4}: {{191, 0, 2}},

	{LM, 5, 1}:  {{31, 41, 2}, {41, 61, 4}, {61, 71, 8}, {71, 0, 16}},
	{LM, 10, 1}: {{11, 21, 2}, {21, 41, 4}, {41, 0, 8}},
	{LM, 20, 1}: {{11, 41, 2}, {41, 0, 4}},
	{LM, 40, 1}: {{11, 0, 2}},
	{LM, 5, 2}:  {{31, 51, 2}, {51, 61, 4}, {61, 71, 8}, {71, 0, 16}},
	{LM, 10, 2}: {{11, 31, 2}, {31, 41, 4}, {41, 0, 8}},
	{LM, 20, 2}: {{31, 41, 2}, {41, 0, 4}},
	{LM, 40, 2}: {{11, 0, 2}},
	{LM, 5, 4}:  {{11, 31, 2}, {31, 71, 4}, {71, 91, 8}, {91, 0, 16}},
	{LM, 10, 4}: {{11, 31, 2}, {31, 61, 4}, {61, 0, 8}},
	{LM, 20, 4}: {{11, 61, 2}, {61, 0, 4}},
	{LM, 40, 4}: {{61, 0, 2}},

	{Recommendation, 512, 1}:  {{21, 41, 2}, {41, 71, 4}, {71, 91, 8}, {91, 0, 16}},
	{Recommendation, 1024, 1}: {{21, 51, 2}, {51, 91, 4}, {91, 0, 8}},
	{Recommendation, 2048, 1}: {{21, 41, 2}, {41, 0, 4}},
	{Recommendation, 4096, 1}: {{41, 0, 2}},
}

// gnsAt is the planned gns batch size of epoch e in a pattern of length E
// (spec §2.3). The segments apply only when E exceeds the first segment's
// start; the first segment is cut at E, every later one at E−1 (the
// original's loop-order quirk that leaves the last epoch at bs0 unless it
// lies in the first segment); multiplied sizes are capped at the model top.
func gnsAt(model string, bs0, sf, E, e int) int {
	segs := gnsSegments[gnsKey{model, bs0, sf}]
	if len(segs) == 0 || E <= segs[0].start {
		return bs0
	}
	for k, s := range segs {
		end := s.end
		if end == 0 {
			end = E
		}
		limit := E - 1
		if k == 0 {
			limit = E
		}
		if e >= s.start && e < min(end, limit) {
			return min(bs0*s.mult, MaxBatchSize(model))
		}
	}
	return bs0
}

// recommendationHead is h of the Recommendation critical test: the first h
// epochs are critical (spec §2.3, §2.5). Batch sizes outside the original's
// templates get 10, like 4096 and 8192.
func recommendationHead(bs0 int) int {
	switch bs0 {
	case 512, 1024:
		return 30
	case 2048:
		return 40
	}
	return 10
}

// resnet18Critical is the ResNet-18 critical-epoch test, the same in the
// planned pattern and at run time (spec §2.3, §2.5).
func resnet18Critical(bs0, e int) bool {
	h := 10
	if bs0 == 256 {
		h = 20
	}
	return e < h || (150 <= e && e < 160) || (250 <= e && e < 260)
}

// plannedCritical is the critical-epoch set C of the planned Accordion
// pattern (spec §2.3). It differs from runtimeCritical.
func plannedCritical(model string, bs0, e int) bool {
	switch model {
	case ResNet18:
		return resnet18Critical(bs0, e)
	case ResNet50:
		return e < 600 && e%30 < 10
	case LM:
		return e < 10
	case Recommendation:
		return e < recommendationHead(bs0) || (60 <= e && e < 70) || (80 <= e && e < 90)
	}
	return true
}

// runtimeCritical is the critical-epoch test of the simulator's Accordion
// adaptation (spec §2.5): Recommendation has no 60–70 or 80–90 windows and
// ResNet-50 no 600-epoch cap, unlike the planned pattern.
func runtimeCritical(model string, bs0, e int) bool {
	switch model {
	case ResNet18:
		return resnet18Critical(bs0, e)
	case ResNet50:
		return e%30 < 10
	case LM:
		return e < 10
	case Recommendation:
		return e < recommendationHead(bs0)
	}
	return true
}

// PlannedBatchSizes is the planned batch size of each of the E epochs of a
// job (spec §2.3), the "profile" pattern:
//   - static: bs0 throughout;
//   - gns: bs0 times the multiplier of the gns table, with the truncation
//     quirk at E−1 for segments after the first and the cap at the model
//     top; combinations outside the table keep bs0;
//   - accordion: Bmax (the model top) in epochs e that are not critical and
//     satisfy e > 0.3·E, bs0 otherwise; Transformer keeps bs0.
//
// Unknown modes behave as static. E ≤ 0 gives an empty slice.
func PlannedBatchSizes(model string, bs0, sf, E int, mode Mode) []int {
	out := make([]int, max(E, 0))
	for e := range out {
		out[e] = bs0
		switch mode {
		case GNS:
			out[e] = gnsAt(model, bs0, sf, E, e)
		case Accordion:
			// e > 0.3·E on reals is 10·e > 3·E on integers; the original's
			// float comparison agrees with it for every E below 2·10^5.
			if model != Transformer && !plannedCritical(model, bs0, e) && 10*e > 3*E {
				out[e] = MaxBatchSize(model)
			}
		}
	}
	return out
}
