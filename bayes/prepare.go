package bayes

import "math"

// Prepared is a job's tracking state built from its spec alone, ahead of
// its admission (Prepare): the part of Admit that reads nothing the
// forecaster learns. A burst of admissions (the first round of a large
// cluster) then does only what depends on the forecaster's state: the
// job table, the families, the peer table and the model's batch sizes.
type Prepared struct {
	f    *Forecaster // the forecaster whose configuration built it
	spec JobSpec
	j    *job
	used bool
}

// Prepare builds what Admit(spec) would build from spec alone. It reads
// only the forecaster's configuration and changes nothing, so calling it
// or not leaves the same state. It fails, as Admit would, on an invalid
// spec.
func (f *Forecaster) Prepare(spec JobSpec) (*Prepared, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	return &Prepared{f: f, spec: spec, j: f.newJob(spec)}, nil
}

// AdmitPrepared is Admit(spec), using p where p was prepared by this
// forecaster from an equal spec and not used before; any other p
// (nil included) is ignored. The state it leaves is Admit's either way.
func (f *Forecaster) AdmitPrepared(spec JobSpec, p *Prepared) error {
	if p == nil || p.used || p.f != f || p.spec != spec {
		return f.Admit(spec)
	}
	p.used = true
	return f.admit(spec, p.j)
}

// newJob is a job's state before its admission: everything but the
// shared entries it links to.
func (f *Forecaster) newJob(spec JobSpec) *job {
	j := &job{
		spec:   spec,
		epochs: int(ceilDiv(spec.TotalSteps, int64(ipe(spec.DatasetSize, spec.InitialBatchSize)))),
		bs:     spec.InitialBatchSize,
		total:  spec.TotalSteps,
		det:    f.det.new(f.cfg.Detector),
		segs:   []segment{{0, int32(spec.InitialBatchSize)}},
	}
	if spec.Throughput > 0 {
		j.det.SetPriorMean(math.Log(spec.Throughput))
	}
	return j
}
