package coordinator

import (
	"fmt"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Leases that cover several rounds (Config.LeaseRounds = L > 1).
//
// With L = 1 a RUN lease ends with its round plus the grace, so every job
// that keeps running is sent a renewal every round: at 10,000 jobs on
// 2,560 GPUs that is 1,600–1,700 messages a round that change nothing,
// each a delivery to its own connection (docs/scale.md). With L > 1 a RUN
// lease is valid for L rounds plus the grace from its round's start, and a
// job that keeps the same grant is sent a new one only when the lease it
// holds would end less than two rounds after this round's start, or in
// its renewal round, one in every L−1 at a phase its id fixes: once every
// L−1 rounds, spread evenly over the rounds, and a renewal that comes a
// whole round late still finds the job running. A coordinator that fails
// over within that time stops no job.
//
// What it costs: a job preempted while it holds a lease for later rounds
// must stop on its SUSPEND lease alone. The SUSPEND is sent at the round's
// start as with L = 1, and once more in any round in which the job reports
// progress later than the grace after that start while it holds no grant
// (resuspend): a job that missed the SUSPEND, or ignored it, is told again
// at most once a round until its last lease ends. Which leases are covered
// is a function of the log (the round's start and each job's lease
// history), so a replay or a standby covers the same ones.

// runLease sets the expiry of j's RUN lease l of round round, issued at
// its start now, and says whether it is covered: the lease j holds is the
// same grant and lasts at least two more rounds, and this is not one of
// j's renewal rounds, so it need not be sent. A job's renewal rounds are
// one in every L−1, at a phase its id fixes (renewPhase), so that jobs
// that started together do not all renew in the same rounds.
func (c *Core) runLease(j *job, l *protocol.Lease, round int, now float64) (covered bool) {
	if c.cfg.LeaseRounds <= 1 {
		j.runUntil = l.Expiry
		return false
	}
	if l.Extension && j.runUntil >= now+2*c.cfg.RoundSeconds && (round+renewPhase(j.view.ID))%(c.cfg.LeaseRounds-1) != 0 {
		l.Expiry = j.runUntil
		return true
	}
	if c.silent(j, now) {
		// A job that sent nothing for a round and the grace gets one-round
		// leases: if it is cut off, its last long lease ends, and it is
		// marked lost only then (lostAt), so its GPUs go to others once it
		// has stopped.
		j.runUntil = max(j.runUntil, l.Expiry)
		return false
	}
	l.Expiry = now + float64(c.cfg.LeaseRounds)*c.cfg.RoundSeconds + c.cfg.LeaseGraceSeconds
	j.runUntil = l.Expiry
	return false
}

// silent says whether j sent nothing for more than a round and the grace
// before now.
func (c *Core) silent(j *job, now float64) bool {
	return now-j.lastHeard > c.cfg.RoundSeconds+c.cfg.LeaseGraceSeconds
}

// lostAt says whether a job silent for the job timeout is marked lost at
// now: with leases of several rounds, not before every RUN lease it was
// sent ends within the grace (it may still be running under one, cut off
// from the coordinator). That is the overlap one-round leases allow: the
// previous round's lease of a job marked lost ends a grace into the round
// its GPUs go to another.
func (c *Core) lostAt(j *job, now float64) bool {
	return c.cfg.LeaseRounds <= 1 || now >= j.runUntil-c.cfg.LeaseGraceSeconds
}

// renewPhase spreads jobs over the rounds of a renewal cycle: FNV-1a of
// the id.
func renewPhase(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h)
}

// leasesExpired voids, at a tick at time now, the leases of the previous
// round that ended before now (ExpireLeases): those jobs stopped by
// themselves. With L = 1 every such lease ends at the previous tick plus a
// round and the grace; with L > 1 each at its own expiry.
func (c *Core) leasesExpired(now float64) {
	if !c.cfg.ExpireLeases || !c.life.ticked {
		return
	}
	if c.cfg.LeaseRounds <= 1 && now <= c.life.lastTick+c.cfg.RoundSeconds+c.cfg.LeaseGraceSeconds {
		return
	}
	for _, j := range c.active {
		if j.leaseRound == c.round-1 && (c.cfg.LeaseRounds <= 1 || now > j.runUntil) {
			j.leaseRound, j.workers, j.devices = -1, nil, nil
		}
	}
}

// resuspendReason begins the reason of a SUSPEND lease sent again.
const resuspendReason = "no grant in this round"

// resuspend is the SUSPEND lease sent again to j, which reported progress
// at time now while it holds no grant (nil when none is due): with
// L > 1, when the grace after this round's start has passed, j's last RUN
// lease has not ended, and j was not told again this round.
func (c *Core) resuspend(j *job, e *protocol.Event, now float64) *protocol.Lease {
	if c.cfg.LeaseRounds <= 1 || e.Steps <= 0 || c.ranLast(j) || now >= j.runUntil ||
		now <= c.life.lastTick+c.cfg.LeaseGraceSeconds || j.resuspended == c.round+1 {
		return nil
	}
	j.resuspended = c.round + 1
	l := c.lease(j, protocol.Suspend)
	l.Reason = fmt.Sprintf("%s: progress reported at %.1fs; stop until a RUN lease", resuspendReason, now)
	return &l
}

// roundExpiry is when RUN lease l ends for a node agent: its round's end
// plus the grace, or its own expiry if that comes first. Agents get their
// nodes' desired states every round, so they keep stopping a process that
// outlives its grant (a preempted one that ignores its SUSPEND) as soon as
// with one-round leases; the job's own lease lasts longer.
func (c *Core) roundExpiry(l protocol.Lease) float64 {
	return min(l.Expiry, l.Start+c.cfg.RoundSeconds+c.cfg.LeaseGraceSeconds)
}

// lastExpiry is when the last of a round's leases ends.
func lastExpiry(r *Round) float64 {
	end := r.Start
	for i := range r.Leases {
		end = max(end, r.Leases[i].Expiry)
	}
	return end
}

// toSend is a round's leases without the covered ones.
func toSend(r *Round) []protocol.Lease {
	if len(r.Covered) == 0 {
		return r.Leases
	}
	covered := make(map[string]bool, len(r.Covered))
	for _, id := range r.Covered {
		covered[id] = true
	}
	out := make([]protocol.Lease, 0, len(r.Leases)-len(r.Covered))
	for _, l := range r.Leases {
		if l.Action != protocol.Run || !covered[l.Job] {
			out = append(out, l)
		}
	}
	return out
}

// issuedIn says whether round's leases carry epoch (false when it has none).
func issuedIn(round *Round, epoch uint64) bool {
	return round != nil && len(round.Leases) > 0 && round.Leases[0].Epoch == epoch
}
