// Package market solves Shockwave's per-round Volatile Fisher Market
// (spec §4.5) in pure Go: which jobs run in each of the next T rounds.
//
// # The problem (spec §4.5)
//
// Jobs i = 1..N have gang width w_i, epochs E_i, progress c_i, seconds per
// epoch d_i, forecast remaining seconds R̂_i and fair-share finish target
// F_i. The window has T rounds of Δ seconds on G GPUs; s = min(1, G/N).
// With binary x[i,t] (job i runs in round R+t) and n_i = Σ_t x[i,t]:
//
//	maximize   (1/(N·T))·Σ_i PWL((c_i + p_i)/E_i) − k·max_i max(0, R̂_i − d_i·p_i)
//	subject to Σ_i w_i·x[i,t] ≤ G                              (every round t)
//	           0 ≤ p_i ≤ Δ·n_i/d_i,  (c_i + p_i)/E_i ≤ 1
//	           Δ·(R+T) + max(0, R̂_i − d_i·p_i)/s ≤ ρmax·F_i      (FTF, every i)
//
// PWL interpolates ln through (B_j, ln B_j) with ln 0 replaced by ln 1e-6
// (Settings.ExactLog uses ln max(u, 1e-6) instead). If no x meets the FTF
// constraints, the relaxation drops them and weights job i's log by
//
//	π_i = ρ̃_i^λ   if ρ̃_i > ρmax and R̂_i ≥ Δ,
//	π_i = ρ̃_i^100 if ρ̃_i > ρmax and R̂_i < Δ,   π_i = 1 otherwise,
//	ρ̃_i = (Δ·R + R̂_i/s)/F_i,
//
// (π clamped at 1e200, where ρ̃^100 would overflow), and the result says
// Relaxed. An infeasible FTF set is never an error. With
// Settings.Fairness = FairnessTightest the constraints are kept instead at
// the tightest bound some allocation meets, together with lower bounds for
// the jobs that would extend the makespan (fair.go, Result.RhoBound).
//
// # Reduction to round counts
//
// The objective and the FTF constraints grow with p_i (the log is
// increasing, the remaining time falls), so p_i = min(Δ·n_i/d_i, E_i − c_i)
// is optimal for a given n_i, and everything but the capacity depends on x
// only through n_i ∈ {0..T}: a separable concave utility g_i(n_i) (the
// PWL of a concave function of n_i), lower bounds on n_i (FTF), a min-max
// term, and the requirement that the counts pack into the rounds: job i in
// n_i distinct rounds, at most G GPUs per round.
//
// # Algorithm
//
// Makespan search. The optimum's max_i r_i(n_i), r_i(n) = max(0, R̂_i −
// d_i·p_i(n)), is one of the finitely many values r_i(n), each M giving
// lower bounds n_i ≥ m_i(M). The smallest feasible M is found by bisection
// (feasibility of lower bounds is a packing check); then intervals of
// candidates are split best bound first: with U(M) the best utility under
// bound M (nondecreasing in M), every candidate strictly between solved
// candidates a < b scores at most UB(c_b) − k·c_{a+1}, so whole intervals
// are pruned, both when k is large (the smallest M wins) and when k = 0.
//
// Class relaxation (per M, exact for its constraints). Jobs are grouped by
// width. In one round the gangs of width ≥ w occupy a sum of such widths
// ≤ G, hence the nested cuts Σ_{w_i ≥ w} w_i·n_i ≤ T·(largest such sum ≤
// G), valid for any packing (2-GPU gangs on G = 3 get one per round, which
// settles the counter-example of TestSolve_GangCounterExample). Within a
// class all job-rounds cost the same, so the best use of m job-rounds is the
// m largest marginal gains (exact for concave g_i); across classes a
// dynamic program over the GPU-rounds taken by the wider classes solves
// the nested cuts exactly, each step a max-plus convolution with a concave
// function, done by divide and conquer on its monotone arg-max.
//
// Packing. Counts are packed widest gang first (then most rounds), each job
// into its n_i rounds with the most free GPUs. For widths forming a
// divisibility chain (1, 2, 4, 8, …) this decides packability exactly
// (verified against exhaustive search by TestPack_GreedyExactOnChains);
// other widths fall back to an exhaustive search with a budget.
//
// Branch and bound. When the relaxation's counts do not pack, the node is
// first repaired into incumbents (pack what fits, or pack the lower bounds,
// then fill idle GPUs by gain per GPU-round), then its bound is tightened
// by the profile relaxation (strong.go: per-round loads class by class,
// Gale–Ryser conditions within a class, water-filled loads; valid, checked
// against exhaustive enumeration), and finally split by the disjunction
// "some job of a minimal conflicting set J gets fewer rounds" (J is proven
// unpackable, so every packing lies in one of the disjoint children).
//
// # Certificate
//
// Result.Bound is a valid upper bound on the objective over all x that pack
// (every region of the search is either explored or closed with its
// relaxation bound). Gap = (Bound − Objective)/|Objective|, the measure of
// the original's MIPGap. Status is Optimal when Bound and Objective agree to
// rounding, GapBounded when Gap ≤ Settings.Gap (default 1e-3, as the
// original's Gurobi setting), Relaxed for the relaxation (Gap says how
// close), and Limit when the node budget ran out first: the allocation is
// still feasible. Limit occurs on small clusters whose gangs are as wide as
// a quarter to half of the cluster; on typical clusters (G ≥ 32, gangs ≤ 8)
// the first relaxation already packs.
//
// # Placement and tie-breaks
//
// The objective is symmetric in t, so which jobs run in the current round
// is a tie-break (spec §4.10). This package always applies the re-rank
// rule of the relaxation, whose objective Σ_i π_i·(Σ_t t·y_it)/n_i weighs
// each round of job i by π_i/n_i: jobs are ranked by π_i·ρ̃_i/n_i
// descending (π_i the relaxation's priority, also for unrelaxed solves; the
// factor ρ̃_i orders the many jobs with π_i = 1 by how close they are to
// their fair-share target), then π_i, ρ̃_i and n_i descending, then ID. The
// packing's rounds are ordered so that the round holding the best-ranked
// jobs comes first, and each job in rank order is moved to earlier rounds
// (into free GPUs, or by swapping with a lower-ranked job) while it can.
// Among jobs with π_i = 1 alone, the order without the ρ̃ factor (π_i/n_i,
// the literal re-rank weight) gave within 0.1 % of the released 120-job run
// on makespan and JCT but a worse worst-case ρ; with it, every metric of
// that run is matched or beaten (README, results). It is a deterministic
// heuristic for the re-rank MILP, exact in its exchange argument when all
// widths are equal and the ρ̃ factors are 1. Under FairnessTightest the rank
// differs (tightRank, place.go): jobs that finish within their planned rounds
// first (by the key above; their finish-aware FTF constraint assumes it), then
// the others by π_i·ρ̃_i/(T − lo_i + 1), lo_i their lower bound, so that a job
// planned for most rounds of every window is not deferred by each re-solve.
// Idle GPUs are not back-filled (§4.6 is the policy's step).
//
// Every result is independent of the order of Problem.Jobs: jobs are put in
// a canonical order (by ID, then by their fields) before anything else, and
// ties anywhere are broken by it. Jobs identical in every field but ID get
// round counts that differ by at most one.
package market
