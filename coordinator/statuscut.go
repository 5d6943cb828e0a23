package coordinator

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// A status reply lists the whole job table unless the request sets a
// limit; at 10,000 jobs with a plan it is about 6 MB, more than an
// external NATS server takes in one message by default (1 MB). A reply
// the server would refuse is not sent (nats.go refuses it before it
// leaves), and the caller only saw its request time out. So the reply is
// cut to what fits: the unfinished jobs furthest from their fair share
// first, as the web view shows them, with the table's size in JobsTotal
// and the plan explaining only the jobs listed.

// cutStatus lists at most n of rep's jobs: the unfinished ones with the
// plan's highest projected ρ, then the rest in the table's order (active,
// pending, then ended), as Core.ShownJobs picks them. The plan then
// explains only those. rep's slices are not changed.
func cutStatus(rep protocol.StatusReply, n int) protocol.StatusReply {
	if n >= len(rep.Jobs) {
		return rep
	}
	total := max(rep.JobsTotal, len(rep.Jobs))
	at := make(map[string]int, len(rep.Jobs))
	for i, j := range rep.Jobs {
		at[j.Job] = i
	}
	var chosen []policy.Explanation
	if rep.Plan != nil {
		chosen = highestRho(rep.Plan.Explain, n, func(e policy.Explanation) bool {
			i, ok := at[e.Job]
			return ok && (rep.Jobs[i].State == string(Active) || rep.Jobs[i].State == string(Pending))
		})
	}
	rows := make([]protocol.JobInfo, 0, n)
	shown := make(map[string]bool, n)
	for _, e := range chosen {
		rows = append(rows, rep.Jobs[at[e.Job]])
		shown[e.Job] = true
	}
	for _, j := range rep.Jobs {
		if len(rows) == n {
			break
		}
		if !shown[j.Job] {
			rows = append(rows, j)
			shown[j.Job] = true
		}
	}
	rep.Jobs, rep.JobsTotal = rows, total
	rep.Plan = explainOnly(rep.Plan, shown)
	return rep
}

// explainOnly is p with the explanations of the shown jobs only (p itself
// unchanged).
func explainOnly(p *protocol.PlanInfo, shown map[string]bool) *protocol.PlanInfo {
	if p == nil {
		return nil
	}
	q := *p
	q.Explain = slices.DeleteFunc(slices.Clone(p.Explain), func(e policy.Explanation) bool { return !shown[e.Job] })
	return &q
}

// encodeStatus encodes rep in at most limit bytes, cutting its job table
// as far as needed (cutStatus) when cut is set. A reply that does not fit
// even with no job listed (or, not cut, at all) becomes an error naming
// both sizes.
func encodeStatus(rep protocol.StatusReply, limit int64, cut bool) []byte {
	data, err := json.Marshal(rep)
	for cut && err == nil && int64(len(data)) > limit && len(rep.Jobs) > 0 {
		// Aim a tenth under the limit; always list at least one job fewer.
		n := int(float64(len(rep.Jobs)) * 0.9 * float64(limit) / float64(len(data)))
		rep = cutStatus(rep, min(n, len(rep.Jobs)-1))
		data, err = json.Marshal(rep)
	}
	if err == nil && int64(len(data)) <= limit {
		return data
	}
	if err == nil {
		err = fmt.Errorf("the status reply is %d bytes with %d jobs listed, more than the server's limit of %d bytes a message", len(data), len(rep.Jobs), limit)
	}
	data, _ = json.Marshal(protocol.StatusReply{V: protocol.Version, Error: protocol.ErrorOf(protocol.CodeTooLarge, err)})
	return data
}
