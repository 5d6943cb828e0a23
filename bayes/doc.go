// Package bayes forecasts the remaining run time of training jobs whose
// batch size and speed change while they run, from live events only: what
// a job reports (steps, epochs, batch size, measured throughput) and what
// jobs of the same model family did before it. It replaces the original
// Shockwave's profile-based estimate (spec shared/spec/SHOCKWAVE.md §4.1–4.3,
// which reads each job's planned batch-size schedule) for the coordinator's
// "online" information mode. It is a pure library: no clock, no global
// random source, no I/O; the same calls give the same results bit for bit.
//
// # Change points on throughput (Detector)
//
// Each job's measured log steps/s is watched by Bayesian online
// change-point detection (R. P. Adams and D. J. C. MacKay, "Bayesian
// Online Changepoint Detection", arXiv:0710.3742, 2007) with a Normal
// model of unknown mean and precision per segment: a Normal-Gamma prior,
// Student-t predictive (NormalGamma; K. P. Murphy, "Conjugate Bayesian
// analysis of the Gaussian distribution", 2007), and a constant hazard H.
// The run-length posterior is kept in at most MaxRun+1 cells (grown with
// the longest run held, so a job that waits holds one; the per-run-length
// tables and Observe's scratch are shared by a Forecaster's detectors);
// runs longer than MaxRun share the last cell, which forgets at the rate
// of a MaxRun-long run, so memory per job is bounded and, once the cells
// are grown, Observe does not allocate. A reported batch-size change is a known
// change point (KnownChange: run length 0 with probability 1); an
// unannounced shift (interference, a model change) is detected.
// ChangeProb is the probability that an unannounced change happened within
// the last Window observations; Mean is the current segment's level, the
// forecaster's throughput estimate at the current batch size.
//
//	type DetectorConfig struct{ Hazard float64; MaxRun int; Prior NormalGamma; Window int; Prune float64; FixedPrior bool }
//	func NewDetector(cfg DetectorConfig) *Detector
//	func (d *Detector) Observe(x float64) (changeProb float64)
//	func (d *Detector) KnownChange()
//	func (d *Detector) ChangeProb() float64
//	func (d *Detector) ChangeWithin(k int) float64
//	func (d *Detector) RunLength() int      // MAP run length
//	func (d *Detector) RunLengthProb(r int) float64
//	func (d *Detector) Mean() float64       // log scale
//	func (d *Detector) MeanVariance() float64
//	func (d *Detector) SetPriorMean(mu float64)
//
// # Batch-size regimes (Forecaster)
//
// Regimes are batch-size levels. A job's future levels follow a
// non-homogeneous Markov chain indexed by the absolute epoch: the jobs the
// simulator generates with one recipe (model, mode, bs0, workers) follow
// one pattern as a function of the epoch (gns doubles at fixed epochs,
// accordion leaves bs0 for Bmax outside "critical" epochs and returns in
// them; spec §2.3, §2.5). The transition from level i at epoch e is a
// hierarchical Dirichlet posterior mean (D. J. C. MacKay and L. Peto, "A
// hierarchical Dirichlet language model", 1995):
//
//	P_node(j | i, e) = (n_node(e, i→j) + β_node · P_parent(j | i, e)) / (occ_node(e, i) + β_node)
//
// over the chain recipe → model+mode → model → the job's weak prior. The
// counts come from the epochs jobs of the family went through: a job
// teaches the transition e → e+1 as soon as it has run in epoch e+1 (a
// fact that later events cannot change), and the rest of its history when
// it completes. Coarse families name levels so that they pool jobs with
// different bs0: model+mode of accordion by "bs0" or the absolute large
// batch size, the other coarse families by the multiple of bs0. The weak
// prior, used where no family has data, is "stay, with a per-epoch hazard
// of moving": a Beta posterior mean of the job's own change rate around
// WeakHazard (0 for a static job), toward 2·bs (gns or an unknown mode) or
// between bs0 and the largest level known (accordion).
//
// The throughput of each level is, in order: the job's own measurement
// (the detector at the current level, the last segment mean at levels it
// left); the peers' mean log steps/s at (model, batch size, workers),
// shifted by the job's own offset from its peers; the declared throughput
// at bs0; otherwise an extrapolation from the nearest known level with the
// model's learned slope of log samples/s per doubling of the batch size (a
// Normal-Gamma posterior updated from completed jobs' measured levels;
// prior mean 0.1, i.e. about 7 % more samples/s per doubling). A job with
// none of these assumes UninformedSamplesPerGPU and its forecast says
// Uninformed.
//
// # Remaining run time
//
// Steps per epoch at batch size b are ceil(S/b); E = ceil(TotalSteps/
// ceil(S/bs0)) stays fixed when a job rescales (spec §2.5 step 5). With
// position p = StepsDone/ceil(S/b) epochs, the remaining isolated time is
// R = Σ_{e≥⌊p⌋} w_e·d(b_e), where w_e is the fraction of epoch e still to
// run (the current epoch and the partial last one are fractions) and
// d(b) = ceil(S/b)/θ(b). Forecast computes E[R] and E[R²] by a forward
// recursion over the remaining epochs (mass, first and second moment per
// level; O(E·L²) with L ≤ 12 levels, rows without mass skipped), adds the
// throughput uncertainty Σ_ℓ (N_ℓ d_ℓ)²(e^{v_ℓ}−1) (N_ℓ expected epochs at
// level ℓ, v_ℓ the variance of its log throughput), and reports P10/P90 of
// the log-normal with that mean and variance. Dist.FinishUnderShare maps
// it to a finish time now + R/share (spec §4.4's fair-share estimate).
//
//	func NewForecaster(cfg ForecastConfig) *Forecaster
//	func (f *Forecaster) Admit(spec JobSpec) error
//	func (f *Forecaster) Observe(id string, o Observation) error
//	func (f *Forecaster) Complete(id string)
//	func (f *Forecaster) Remove(id string)
//	func (f *Forecaster) Forecast(id string) (Forecast, error)
//	func (d Dist) FinishUnderShare(now, share float64) Dist
//
// Observe is called once per round for each job that ran (and with Elapsed
// 0 when only its state changed, e.g. a batch-size change). Observation.
// Epoch is range-checked but the position comes from StepsDone, which
// carries the fraction of the current epoch. Complete teaches the job's
// remaining transitions and its throughput ratios, then forgets it;
// Remove forgets a job that left unfinished: what it already taught (its
// measured throughputs and the transitions of epochs it went through)
// stays, its throughput ratios teach nothing. Bad input returns an error
// naming the field and changes no state.
//
// Forecast.Family names the finest family level with data behind the
// forecast ("recipe", "model+mode", "model" or "weak"); NextBatchSize and
// NextProb are the most likely level of the job's next change and the
// probability that this change happens before the job ends.
//
// # Limits
//
// A forecast tracks at most 12 levels and a family node learns at most 8;
// further levels are ignored. A job remembers at most 4,096 regime
// changes; past that it stops teaching. Per-family tables grow with the
// longest job's epoch count (at most MaxJobEpochs).
package bayes
