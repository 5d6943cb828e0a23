package policy

import (
	"slices"

	"github.com/shockwave-sched/shockwave/bayes"
)

// swPrepared is what Shockwave builds for a job ahead of its admission
// (Preparer): its metadata but the submit time, and in online mode the
// forecaster's state of the job and its empty online entry. Both are built
// from the view alone (the metadata reads nothing else; the forecaster
// checks that the state is its own), and it keeps the fields they read to
// check that the admitted view still has them.
type swPrepared struct {
	in    swAdmitInputs
	bss   []int     // PlannedBatchSizes
	secs  []float64 // PlannedEpochSeconds
	meta  *swMeta
	fc    *bayes.Prepared // nil in profile mode, or for a spec the forecaster refuses
	entry *swOnlineJob    // its empty online entry (online mode)
	used  bool
}

// swAdmitInputs are the view's fields newSWMeta reads, besides the
// declared schedule (the forecaster checks its own spec).
type swAdmitInputs struct {
	id                    string
	workers, dataset, bs0 int
	total                 int64
	throughput            float64
}

func admitInputs(j *Job) swAdmitInputs {
	return swAdmitInputs{id: j.ID, workers: j.Workers, dataset: j.DatasetSize, bs0: j.InitialBatchSize,
		total: j.TotalSteps, throughput: j.Throughput}
}

// Prepare builds j's metadata and forecaster state (Preparer).
func (s *Shockwave) Prepare(j *Job) Prepared {
	p := &swPrepared{in: admitInputs(j), bss: j.PlannedBatchSizes, secs: j.PlannedEpochSeconds, meta: newSWMeta(j, 0)}
	if s.online != nil {
		p.fc, _ = s.online.fc.Prepare(s.online.spec(j)) // an invalid spec is refused again, and reported, at the admission
		p.entry = &swOnlineJob{}
	}
	return p
}

// AdmitPrepared is Admit(j) with what Prepare built, where it was built
// from the same inputs (Preparer).
func (s *Shockwave) AdmitPrepared(j *Job, p Prepared) {
	sp, ok := p.(*swPrepared)
	if !ok || sp.used || sp.in != admitInputs(j) || !slices.Equal(sp.bss, j.PlannedBatchSizes) ||
		!slices.Equal(sp.secs, j.PlannedEpochSeconds) {
		s.admit(j, nil)
		return
	}
	sp.used = true
	s.admit(j, sp)
}
