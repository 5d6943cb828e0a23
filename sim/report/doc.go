// Package report turns simulation results ([sim.Result]) into the three
// things people read: a JSON document for other tools ([WriteJSON]), an
// aligned text table for a terminal ([WriteTable]) and PNG charts ([Plot]).
//
// All three take the results in the order they should be shown and print
// the metrics of spec §6: makespan, average JCT, the worst finish-time
// fairness ρ (static contention factor), the share of jobs with ρ > 1.05
// and ρ > 1.1, cluster utilization and the number of rounds.
//
// # Ratios in the table
//
// For makespan, average JCT, worst ρ and the unfair share (ρ > 1.05) lower is
// better, and the table shows each policy's value divided by the best
// (lowest) value in the column, so the best policy reads 1.00×. This is the
// form of the ratio table in spec §7.2, except that §7.2 divides by
// Shockwave rather than by the best. Two cases need a convention:
//
//   - the best value is 0 (no unfair job): a policy that is also at 0 ties
//     the best and reads 1.00×; a policy above 0 reads ∞;
//   - a value is not a number (a run without jobs): the cell reads —, and
//     the value takes no part in choosing the best.
//
// A * after a value marks the best in its column (ties all get one). For
// utilization the best is the highest value; rounds carry no mark.
//
// # Names
//
// Policies appear in the table and charts under the names of the paper
// (max_min_fairness is Gavel, finish_time_fairness is Themis,
// min_total_duration is OSSP, max_sum_throughput_perf is MST, …); unknown
// names are shown as given. JSON keeps [sim.Result.Policy] unchanged.
//
// # Determinism
//
// Nothing here reads the clock or draws random numbers; the same results
// give the same bytes, for the JSON, the table and the PNG files.
package report
