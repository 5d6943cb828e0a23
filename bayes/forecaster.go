package bayes

import (
	"fmt"
	"math"
)

// MaxJobEpochs bounds the epochs a job may imply (the protocol's limit):
// per-job and per-family state grows with the epoch count.
const MaxJobEpochs = 100_000

// maxLevels bounds the batch-size levels one forecast tracks, and
// maxNodeLevels the levels one family node learns; further levels are
// ignored (documented in doc.go).
const (
	maxLevels     = 12
	maxNodeLevels = 8
	maxSegments   = 4096 // regime changes remembered per job
)

// ForecastConfig parameterises a Forecaster. The zero value of a field
// means its default (DefaultForecastConfig).
type ForecastConfig struct {
	// Detector configures each job's change-point detector on its
	// log-throughput stream.
	Detector DetectorConfig
	// RecipeStrength, ModeStrength and ModelStrength are the concentrations
	// β of the hierarchical Dirichlet smoothing of per-epoch transitions
	// at the three family levels (recipe = model, mode, bs0, workers;
	// model+mode; model): a level's estimate is (counts + β·parent) /
	// (occupancy + β). Positive.
	RecipeStrength, ModeStrength, ModelStrength float64
	// WeakHazard is the per-epoch probability of a batch-size change in
	// the weak prior of a job with a dynamic (non-static) mode, before its
	// own history is seen; in [0, 1).
	WeakHazard float64
	// WeakStrength is the weight, in pseudo-epochs, of WeakHazard against
	// the job's own observed change rate (a Beta prior). Positive.
	WeakStrength float64
	// Ratio is the prior of y = log2-slope of samples/s against batch size
	// (y = Δln(samples/s) / Δlog2(batch size)) used to guess the
	// throughput of a batch size never measured; learned per model from
	// completed jobs.
	Ratio NormalGamma
	// UninformedSamplesPerGPU is the samples/s per GPU assumed for a job
	// with no declared, measured or peer throughput (Forecast.Uninformed).
	UninformedSamplesPerGPU float64
}

// DefaultForecastConfig returns the defaults: strengths 0.5 (recipe), 1
// (model+mode), 2 (model); weak hazard 0.002 per epoch with 50
// pseudo-epochs (a sweep over 0.0005–0.03 on generated workloads favoured
// the low end: jobs with no family data change rarely before their family
// is seen);
// ratio prior centred on 0.1 (a doubled batch size processes about 7 %
// more samples per second) with a scale of about 0.3; 500 samples/s per GPU
// when nothing is known.
func DefaultForecastConfig() ForecastConfig {
	return ForecastConfig{
		Detector:       DefaultDetectorConfig(),
		RecipeStrength: 0.5, ModeStrength: 1, ModelStrength: 2,
		WeakHazard: 0.002, WeakStrength: 50,
		Ratio:                   NormalGamma{Mu: 0.1, Kappa: 1, Alpha: 2, Beta: 0.09},
		UninformedSamplesPerGPU: 500,
	}
}

func (c ForecastConfig) withDefaults() (ForecastConfig, error) {
	d := DefaultForecastConfig()
	c.Detector = mergeDetector(c.Detector, d.Detector)
	if c.RecipeStrength == 0 {
		c.RecipeStrength = d.RecipeStrength
	}
	if c.ModeStrength == 0 {
		c.ModeStrength = d.ModeStrength
	}
	if c.ModelStrength == 0 {
		c.ModelStrength = d.ModelStrength
	}
	if c.WeakHazard == 0 {
		c.WeakHazard = d.WeakHazard
	}
	if c.WeakStrength == 0 {
		c.WeakStrength = d.WeakStrength
	}
	if c.Ratio == (NormalGamma{}) {
		c.Ratio = d.Ratio
	}
	if c.UninformedSamplesPerGPU == 0 {
		c.UninformedSamplesPerGPU = d.UninformedSamplesPerGPU
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"recipe strength", c.RecipeStrength}, {"mode strength", c.ModeStrength},
		{"model strength", c.ModelStrength}, {"weak strength", c.WeakStrength},
		{"uninformed samples per GPU", c.UninformedSamplesPerGPU},
	} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return c, fmt.Errorf("bayes: forecast config: %s %g must be finite and positive", f.name, f.v)
		}
	}
	if !(c.WeakHazard >= 0 && c.WeakHazard < 1) {
		return c, fmt.Errorf("bayes: forecast config: weak hazard %g must be in [0, 1)", c.WeakHazard)
	}
	if err := c.Ratio.Validate(); err != nil {
		return c, fmt.Errorf("forecast config ratio prior: %w", err)
	}
	if err := ValidateDetectorConfig(c.Detector); err != nil {
		return c, fmt.Errorf("forecast config: %w", err)
	}
	return c, nil
}

func mergeDetector(c, d DetectorConfig) DetectorConfig {
	if c == (DetectorConfig{}) {
		return d
	}
	return c // zero fields are filled by NewDetector
}

// JobSpec is what a job declares when it is admitted.
type JobSpec struct {
	ID, Model, Mode  string // Mode: "static", "gns", "accordion" or "" (unknown)
	Workers          int    // gang width, ≥ 1
	InitialBatchSize int    // bs0, ≥ 1
	DatasetSize      int    // samples per epoch S, ≥ 1
	TotalSteps       int64  // steps at bs0, ≥ 1
	// Throughput is the declared isolated steps/s at bs0 on Workers GPUs;
	// 0 means unknown.
	Throughput float64
}

func (s JobSpec) validate() error {
	switch {
	case s.ID == "":
		return fmt.Errorf("bayes: job spec: empty id")
	case s.Model == "":
		return fmt.Errorf("bayes: job %s: empty model", s.ID)
	case s.Workers < 1:
		return fmt.Errorf("bayes: job %s: workers %d must be at least 1", s.ID, s.Workers)
	case s.InitialBatchSize < 1:
		return fmt.Errorf("bayes: job %s: initial batch size %d must be at least 1", s.ID, s.InitialBatchSize)
	case s.DatasetSize < 1:
		return fmt.Errorf("bayes: job %s: dataset size %d must be at least 1", s.ID, s.DatasetSize)
	case s.TotalSteps < 1:
		return fmt.Errorf("bayes: job %s: total steps %d must be at least 1", s.ID, s.TotalSteps)
	case !(s.Throughput >= 0) || math.IsInf(s.Throughput, 0):
		return fmt.Errorf("bayes: job %s: throughput %g must be finite and non-negative", s.ID, s.Throughput)
	}
	if e := ceilDiv(s.TotalSteps, int64(ipe(s.DatasetSize, s.InitialBatchSize))); e > MaxJobEpochs {
		return fmt.Errorf("bayes: job %s: %d total steps make %d epochs, more than %d", s.ID, s.TotalSteps, e, MaxJobEpochs)
	}
	return nil
}

// Observation is a job's state after one slice of execution (or after a
// state change only, with Elapsed 0).
type Observation struct {
	StepsDone  int64   // cumulative steps, counted at BatchSize; ≥ 0
	TotalSteps int64   // steps the job needs in all, at BatchSize; ≥ 1
	Epoch      int     // completed epochs (checked, informational: the position comes from the steps)
	BatchSize  int     // batch size used in this slice (or adopted); ≥ 1
	Throughput float64 // measured steps/s at BatchSize over this slice; 0 = none
	Elapsed    float64 // seconds of execution in this slice; ≥ 0
}

func (o Observation) validate(id string) error {
	switch {
	case o.StepsDone < 0:
		return fmt.Errorf("bayes: job %s: steps done %d must be non-negative", id, o.StepsDone)
	case o.TotalSteps < 1:
		return fmt.Errorf("bayes: job %s: total steps %d must be at least 1", id, o.TotalSteps)
	case o.Epoch < 0:
		return fmt.Errorf("bayes: job %s: epoch %d must be non-negative", id, o.Epoch)
	case o.BatchSize < 1:
		return fmt.Errorf("bayes: job %s: batch size %d must be at least 1", id, o.BatchSize)
	case !(o.Throughput >= 0) || math.IsInf(o.Throughput, 0):
		return fmt.Errorf("bayes: job %s: throughput %g must be finite and non-negative", id, o.Throughput)
	case !(o.Elapsed >= 0) || math.IsInf(o.Elapsed, 0):
		return fmt.Errorf("bayes: job %s: elapsed %g must be finite and non-negative", id, o.Elapsed)
	}
	return nil
}

// segment is one regime of a job's history: batch size bs from epoch start.
type segment struct{ start, bs int32 }

// levelObs is a job's own throughput measurement at one batch size: the
// detector's segment mean of log steps/s when the job last left it.
type levelObs struct {
	bs     int
	logThr float64
	v      float64 // variance of logThr
}

// job is the per-job state.
type job struct {
	spec   JobSpec
	nodes  [3]*node // model, model+mode, recipe (coarse to fine)
	epochs int      // E, from the latest report
	bs     int
	steps  int64
	total  int64
	pos    float64 // epochs done (fractional), StepsDone / ceil(S/bs)

	segs      []segment
	truncated bool // more than maxSegments changes: the job stops teaching
	taught    int  // transitions e → e+1 for e < taught are in the families
	changes   int
	det       *Detector
	own       []levelObs // at most maxLevels
	thr       *thrStat   // peer table entry of the current batch size

	exec float64                 // execution seconds reported (Σ Elapsed)
	cal  [len(calMarks)]calPoint // raw bands kept at calMarks (calibrate.go)
	ncal int                     // marks passed

	still *stillMemo // the last still tail of its forecast (forecast_still.go)
}

// Forecaster holds per-job state and per-family priors learned from
// completed jobs. It is deterministic and not safe for concurrent use.
type Forecaster struct {
	cfg   ForecastConfig
	jobs  map[string]*job
	nodes map[famKey]*node
	thr   map[thrKey]*thrStat
	ratio map[string]*NormalGamma // per model; "" pools all models
	batch map[string]*modelBatch  // per model: the batch sizes its jobs used
	cal   calibrator              // the band's scale, learned from completed jobs
	det   detShared               // the jobs' detectors' tables and scratch (from cfg)
	// ver counts the calls that may have changed what forecasts read;
	// memo holds pristine jobs' forecasts at a version (forecast_memo.go).
	ver  uint64
	memo forecastMemo
	// steps counts the epoch steps of every forecast's recursion (Steps).
	steps uint64
	// rows is the family nodes' epoch rows, bounded by maxFamilyRows
	// (evict); counted again from the nodes on load.
	rows int
}

// Steps is the number of epoch steps the forecasts' recursions have made
// so far: a measure of their work that depends only on what they computed
// (a forecast answered from a memo makes none; a still tail or a jump
// counts as one step). Callers bound a round's forecasting with it.
func (f *Forecaster) Steps() uint64 { return f.steps }

// modelBatch is what a model's jobs taught about batch sizes: how many
// jobs were seen and the largest batch size any of them used.
type modelBatch struct {
	jobs, max int
}

// capJobs is how many jobs of a model must have been seen before the
// largest batch size they used bounds the levels a forecast considers: a
// model's largest usable batch size (its memory limit, or its schedule's
// top) is a property of the model, learned from its jobs. Without the
// bound, coarse families extrapolate growth that cannot happen (a job that
// starts at the model's largest batch size was forecast to grow 16×). On
// the 120-job trace, a bound after 2, 5, 10 or 20 jobs gave average JCTs of
// 10308, 10389, 10200 and 10369 s; 10 asks for the most evidence short of
// leaving most of a small trace unbounded.
const capJobs = 10

// batchCap returns the largest batch size a forecast for a job of model
// may consider, or 0 when too few jobs of the model were seen.
func (f *Forecaster) batchCap(model string) int {
	if mb := f.batch[model]; mb != nil && mb.jobs >= capJobs {
		return mb.max
	}
	return 0
}

func (f *Forecaster) sawBatch(model string, bs int, newJob bool) (changed bool) {
	mb := f.batch[model]
	if mb == nil {
		mb = &modelBatch{}
		f.batch[model] = mb
		changed = true
	}
	if newJob {
		mb.jobs++
		changed = true
	}
	if bs > mb.max {
		mb.max, changed = bs, true
	}
	return changed
}

// NewForecaster returns an empty forecaster. It panics on an invalid
// configuration; ValidateForecastConfig checks one first.
func NewForecaster(cfg ForecastConfig) *Forecaster {
	c, err := cfg.withDefaults()
	if err != nil {
		panic(err)
	}
	return &Forecaster{
		cfg: c, jobs: map[string]*job{}, nodes: map[famKey]*node{}, det: newDetShared(c.Detector),
		thr: map[thrKey]*thrStat{}, ratio: map[string]*NormalGamma{}, batch: map[string]*modelBatch{},
	}
}

// ValidateForecastConfig reports what is wrong with a configuration after
// defaults are applied, or nil.
func ValidateForecastConfig(cfg ForecastConfig) error {
	_, err := cfg.withDefaults()
	return err
}

// Len is the number of jobs the forecaster tracks.
func (f *Forecaster) Len() int { return len(f.jobs) }

// Admit starts tracking a job. It fails, changing nothing, on a duplicate
// id or an invalid spec.
func (f *Forecaster) Admit(spec JobSpec) error {
	if err := spec.validate(); err != nil {
		return err
	}
	return f.admit(spec, nil)
}

// admit tracks a valid spec with j, its state from newJob (nil: built
// here).
func (f *Forecaster) admit(spec JobSpec, j *job) error {
	f.changed()
	if _, dup := f.jobs[spec.ID]; dup {
		return fmt.Errorf("bayes: job %s already admitted", spec.ID)
	}
	if j == nil {
		j = f.newJob(spec)
	}
	for lvl := range j.nodes {
		j.nodes[lvl] = f.node(familyKey(lvl, spec))
	}
	j.thr = f.thrEntry(spec.Model, j.bs, spec.Workers)
	f.jobs[spec.ID] = j
	f.sawBatch(spec.Model, spec.InitialBatchSize, true)
	f.bound()
	return nil
}

// Reserve makes room for n more jobs: the job table is sized once for a
// burst of admissions (the first round of a large cluster) rather than
// grown admission by admission. It changes nothing else.
func (f *Forecaster) Reserve(n int) {
	if n < max(len(f.jobs), 1) {
		return
	}
	jobs := make(map[string]*job, len(f.jobs)+n)
	for id, j := range f.jobs {
		jobs[id] = j
	}
	f.jobs = jobs
}

// Observe folds one report of a running job. A batch size different from
// the previous report's is a known change point: the regime history gets a
// new segment starting at the epoch the job had reached (the simulator
// rounds completed epochs up on a change, §2.5 step 6) and the detector
// restarts. A positive Throughput is one observation of log steps/s for
// the detector and the peer throughput table. It fails, changing nothing,
// for an unknown job or an invalid observation.
func (f *Forecaster) Observe(id string, o Observation) error {
	j, ok := f.jobs[id]
	if !ok {
		return fmt.Errorf("bayes: unknown job %s", id)
	}
	if err := o.validate(id); err != nil {
		return err
	}
	// What forecasts of other jobs read changes only through the model's
	// batch sizes, a regime change (a peer table entry), a throughput
	// (the peer table) or taught transitions (the families); the rest is
	// the job's own state, which a pristine job's memo key holds
	// (forecast_memo.go). Only those bump the version.
	shared := f.sawBatch(j.spec.Model, o.BatchSize, false) || o.BatchSize != j.bs || o.Throughput > 0
	prevPos := j.pos
	n := ipe(j.spec.DatasetSize, o.BatchSize)
	pos := float64(o.StepsDone) / float64(n)
	if o.BatchSize != j.bs {
		start := math.Ceil(prevPos - 1e-9)
		if o.Elapsed == 0 {
			start = math.Floor(pos + 1e-9)
		}
		f.changeRegime(j, o.BatchSize, int(max(start, 0)))
	}
	j.steps, j.total = o.StepsDone, o.TotalSteps
	j.epochs = max(1, int(ceilDiv(o.TotalSteps, int64(n))))
	j.pos = min(pos, float64(j.epochs))
	if o.Throughput > 0 {
		x := math.Log(o.Throughput)
		if len(j.own) == 0 && j.det.Observations() == 0 && !(j.spec.Throughput > 0) {
			// Nothing centred the prior yet: the first measurement does, so
			// that the forecast does not depend on the unit of throughput.
			j.det.SetPriorMean(x)
		}
		j.det.Observe(x)
		j.thr.add(x)
	}
	// Epochs below the position have started at their final batch size (a
	// later change starts at ceil(position) or beyond), so the transitions
	// into them are facts: teach them to the families now.
	if f.teach(j, int(math.Ceil(j.pos-1e-9))-1) {
		shared = true
	}
	if shared {
		f.bound()
		f.changed()
	}
	j.exec += o.Elapsed
	f.sample(j)
	return nil
}

// teach folds the job's transitions e → e+1 for taught ≤ e < to into its
// family nodes; it reports whether there were any.
func (f *Forecaster) teach(j *job, to int) bool {
	to = min(to, j.epochs-1)
	if j.truncated || to <= j.taught {
		return false
	}
	for _, nd := range j.nodes {
		if j.taught == 0 {
			nd.jobs++
		}
		had := len(nd.occ)
		nd.teach(j.segs, j.taught, to, j.spec.InitialBatchSize)
		f.rows += len(nd.occ) - had
	}
	j.taught = to
	f.evict(&j.nodes)
	return true
}

// changeRegime records a known change point to batch size bs at epoch
// start.
func (f *Forecaster) changeRegime(j *job, bs, start int) {
	if j.det.Observations() > 0 {
		j.setOwn(j.bs, j.det.Mean(), j.det.MeanVariance())
	}
	j.det.KnownChange()
	if o := j.ownAt(bs); o != nil {
		j.det.SetPriorMean(o.logThr)
	}
	j.bs = bs
	j.changes++
	j.thr = f.thrEntry(j.spec.Model, bs, j.spec.Workers)
	last := &j.segs[len(j.segs)-1]
	start = max(start, int(last.start))
	switch {
	case start == int(last.start):
		last.bs = int32(bs)
		if len(j.segs) > 1 && j.segs[len(j.segs)-2].bs == last.bs {
			j.segs = j.segs[:len(j.segs)-1]
		}
	case len(j.segs) >= maxSegments:
		j.truncated = true
	default:
		j.segs = append(j.segs, segment{int32(start), int32(bs)})
	}
}

func (j *job) ownAt(bs int) *levelObs {
	for i := range j.own {
		if j.own[i].bs == bs {
			return &j.own[i]
		}
	}
	return nil
}

func (j *job) setOwn(bs int, mu, v float64) {
	if o := j.ownAt(bs); o != nil {
		o.logThr, o.v = mu, v
		return
	}
	if len(j.own) < maxLevels {
		j.own = append(j.own, levelObs{bs: bs, logThr: mu, v: v})
	}
}

// Complete ends a finished job: its remaining transitions (to the last
// epoch) teach its families (recipe, model+mode, model), its measured
// throughput ratios teach its model's ratio posterior, and the job is
// forgotten. An unknown id is ignored.
func (f *Forecaster) Complete(id string) {
	j, ok := f.jobs[id]
	if !ok {
		return
	}
	f.changed()
	f.teach(j, j.epochs-1)
	if j.det.Observations() > 0 {
		j.setOwn(j.bs, j.det.Mean(), j.det.MeanVariance())
	}
	f.learnRatios(j)
	f.learnBand(j)
	delete(f.jobs, id)
	f.bound()
}

// Remove forgets a job that left unfinished. What it already taught stays:
// its measured throughputs (peer table) and the transitions of the epochs
// it went through (observed facts); its future teaches nothing, and its
// throughput ratios do not teach the ratio posterior. An unknown id is
// ignored.
func (f *Forecaster) Remove(id string) {
	f.changed()
	delete(f.jobs, id)
}

// learnRatios updates the model's (and the pooled) ratio posterior with
// the log2-slopes of samples/s between the job's measured batch sizes,
// adjacent in size.
func (f *Forecaster) learnRatios(j *job) {
	if len(j.own) < 2 {
		return
	}
	lv := j.own
	// insertion sort by batch size (at most maxLevels entries, no allocation)
	for a := 1; a < len(lv); a++ {
		for b := a; b > 0 && lv[b].bs < lv[b-1].bs; b-- {
			lv[b], lv[b-1] = lv[b-1], lv[b]
		}
	}
	for _, key := range []string{j.spec.Model, ""} {
		r := f.ratio[key]
		if r == nil {
			p := f.cfg.Ratio
			r = &p
			f.ratio[key] = r
		}
		for k := 1; k < len(lv); k++ {
			a, b := lv[k-1], lv[k]
			dl := math.Log2(float64(b.bs) / float64(a.bs))
			y := (b.logThr + math.Log(float64(b.bs)) - a.logThr - math.Log(float64(a.bs))) / dl
			*r = r.Update(y)
		}
	}
}

// ratioPrior is the posterior of the log2-slope for a model: the model's,
// else the pool's, else the configured prior.
func (f *Forecaster) ratioPrior(model string) NormalGamma {
	if r := f.ratio[model]; r != nil {
		return *r
	}
	if r := f.ratio[""]; r != nil {
		return *r
	}
	return f.cfg.Ratio
}

func ipe(dataset, bs int) int { return int(ceilDiv(int64(dataset), int64(bs))) }

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}
