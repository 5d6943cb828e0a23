// Package coordinator holds the scheduler's brain and the service around it.
//
// Core is a deterministic state machine in the shape of etcd's raft RawNode:
// typed inputs (registrations, job events, round ticks) go in, leases and an
// explained per-round plan come out. It does no I/O, reads no clock (every
// input carries the time, in seconds on the coordinator's clock) and takes no
// locks: one goroutine owns it. The simulator drives Core on a virtual clock
// with exactly the events a job's SDK sends; the service drives it from NATS.
//
// A round (spec §3.3): events since the previous tick
// update each job's progress, batch size and throughput and are passed to the
// policy; at the tick, leases that produced no progress count as failures,
// registrations are admitted, the policy allocates, gangs are placed on
// devices of nodes (place.go, repair.go), and leases are issued: RUN (an
// extension when the job ran in the previous round on the same devices),
// SUSPEND for jobs that lost their GPUs, EXIT for jobs the coordinator ended.
//
// # Nodes and placement (nodes.go, place.go, repair.go)
//
// The cluster is a list of nodes (package topology: name, GPU count, type).
// Config.Cluster sets it; with none, Config.GPUs is one node "node-0", the
// flat pool. Cluster-wide GPU ids number the devices node by node in
// topology order; a RUN lease carries both the ids (Workers) and, per node,
// the node's name and its local device indices (Devices, same order). The
// ids follow the current membership (a node leaving shifts the ids of the
// nodes after it, even for a job that keeps its devices); Devices are stable.
//
// Placement, each tick, of the jobs the plan runs:
//
//  1. Widest gang first (plan order among equals). A job that ran in the
//     previous round keeps exactly its devices when they all still exist.
//  2. A resident job (its registration names a Node, and optionally the
//     Visible local devices) gets devices only on that node, within
//     Visible, lowest index first.
//  3. Any other gang no wider than the largest node goes on one node: the
//     fullest node that has room (best fit; lowest topology position among
//     equals), so that small jobs fill partly used nodes and whole nodes
//     stay free for wide gangs. Within a node it takes the lowest free
//     local indices.
//  4. A gang wider than every node spans the fewest nodes the cluster's
//     sizes allow: emptiest nodes first (whole free nodes), the last part
//     best fit; if the free devices would need more nodes, it is not placed.
//
// On one node this is exactly the flat pool's placement of spec §3.4
// (widest first, keep previous GPUs, lowest free ids), so the simulator's
// released-run comparisons are unchanged.
//
// # Plan repair (repair.go)
//
// A policy plans against the GPU count (policy.Snapshot.Nodes tells it the
// node sizes; Shockwave's market uses them, see package policy). When the
// plan fits the count but not the nodes, Core repairs it, deterministically.
// It tries four placements and keeps the first that places every planned
// job, else the one that places the most GPUs (the earliest on a tie): pin first
// (rules 1-4 as above); evict (then each gang left out evicts the kept jobs
// of the one node where the fewest of them make room, and those are fitted
// anew); keep in turn (widest first, each job keeping its devices if they
// are still free); repack (widest first from scratch). Jobs still without a
// place are dropped from the round, and then active jobs the plan left
// waiting are back-filled, in admission order, wherever they fit. Moved,
// dropped and back-filled jobs are explained ("plan repair: …") and named
// in the plan's note; the policy's own plan object is not modified.
//
// # Membership (nodes.go)
//
// JoinNode and LeaveNode change the cluster between ticks (node agents
// joining and leaving; the service logs them so a replay sees them in the
// same order). A node that joins again under the same name is an update of
// its GPU count or type. When a node leaves, or shrinks below a device a job
// holds, that job's lease is void at once: its GPUs show as none, the lease
// is not counted as a failure, and at the next tick the job is placed
// elsewhere if the plan runs it, or gets a SUSPEND lease naming the node.
// With dynamic membership (Config.Dynamic, or any JoinNode/LeaveNode) a gang
// wider than the current cluster is accepted and waits; a static cluster
// refuses it at registration (ErrTooWide), and refuses a resident job whose
// node it does not have (ErrUnknownNode). Jobs that cannot be placed whatever
// the plan (too wide for the current cluster, or resident on an absent
// node, or needing more devices than their node offers them) are left out of
// the policy's snapshot and explained as waiting. With no nodes the policy
// is not called at all.
//
// # Lease lifecycle (lifecycle.go)
//
// The service drives Core through Enroll and Deliver, which add to Register
// and Apply what a live cluster needs: a job silent for JobTimeoutSeconds is
// marked lost at the next tick (it leaves the policy, a SUSPEND lease frees
// its GPUs for others); a lost job that sends an event or registers again is
// pending again and re-admitted with its progress and admission time; a
// registration of a known id with the same parameters resumes the job (an
// SDK restart) and the reply tells the SDK its last sequence number; with
// ExpireLeases a tick after the previous leases expired extends nothing. The
// simulator leaves these off and is unaffected.
//
// # Service
//
// Service (service.go) is one goroutine that owns the Core, in the shape of
// etcd raft's node.run: NATS handlers decode and validate requests and hand
// them over; the loop folds the log, answers status requests, starts rounds
// on a timer and publishes leases.
//
// A round is two log records (pipeline.go). Its tick record opens it:
// Core.BeginTick settles the previous round, admits pending jobs and
// freezes a copy of the policy's input, and the policy solves on its own
// goroutine while the loop goes on folding job events. When the solve
// ends, the leader appends a plan record; folding it closes the round
// (Core.EndTick: placement and leases). While a round is open the Core
// holds back its calls to the policy and makes them after Allocate, the
// order a one-step Core.Tick makes them in, and every record other than
// job events and leader records waits for the close. Where the round
// closes is a record of the log, so a replay reaches the same state; a
// new leader closes a round its predecessor opened. The simulator calls
// Core.Tick, which is the three steps at once. Snapshots are taken
// between rounds; the policy's part is encoded off the loop in the same
// way (its calls held back until it is saved). Subjects and messages are those of
// package protocol. The coordinator embeds a NATS server with JetStream
// (StartEmbedded) unless it is given a cluster to connect to.
//
// # Durability
//
// Every input of Core is a message of one JetStream stream, the log
// (<PREFIX>_LOG): jobs publish their event batches straight into it; the
// service appends its configuration (first record), each registration it
// accepted (with the requester's reply subject) and each round tick. The
// loop applies the stream in order through fold (fold.go), with each
// message's storage timestamp as Core's clock (seconds since the Unix epoch,
// made monotonic). Core and the policies are deterministic folds of their
// inputs, so a restarted coordinator — after a graceful stop, a kill -9 or
// a NATS restart — restores its newest snapshot, replays the log after it
// and reaches exactly the state the old one had: job table, progress, the
// policy's posteriors and fairness targets, and therefore the next plan.
// Replies and leases are sent only for records folded after the replay, so
// every accepted registration is durable before it is answered; the last
// round's leases are sent again after a replay while they are still valid.
//
// The state is also snapshotted (snapshot.go, recovery.go): every
// SnapshotRounds rounds the fold's whole state — Core, its jobs, the
// policy's own state (Shockwave's market plan, fair-share targets and
// bayes posteriors; the Gavel mechanism's deficits and allocations;
// Themis's and AlloX's memory) — is encoded in a versioned, SHA-256-
// checked envelope and stored in the object store <PREFIX>_SNAP. A
// restart restores the newest snapshot and replays only the records
// after it, so restart time depends on the state and one round's records,
// not on history. The log is compacted behind the older of the two
// snapshots kept, never by age, so no record leaves it before two durable,
// verified snapshots cover it. A damaged log or snapshot (a lost, missing
// or garbled record, a digest that disagrees) makes the coordinator
// refuse to serve with an IntegrityError, unless ServiceConfig.Recover is
// set: it then continues from the newest good snapshot and says what was
// lost. docs/durability.md has the format and the numbers.
//
// After each round a summary (job table, last plan, round index, the log
// sequence it covers and a digest) is written to the KV bucket
// <PREFIX>_STATE, for operators (ReadSnapshot works while the coordinator
// is down), as a high-water mark of the log, and to verify a restart: when
// the replay reaches the summary's sequence, the digests must agree.
//
// The log's configuration record pins GPUs, round length, timeouts and the
// policy: a coordinator started on the same log with other settings refuses
// to run rather than replay the past under different rules.
//
// # Security (security.go)
//
// AuthNone for loopback development; AuthToken, one shared token; AuthCreds,
// per-job credentials: the embedded server runs in operator mode with a
// COORD account (coordinator, log, admins) and a JOBS account that imports
// the register, events and lease subjects; each job's user JWT allows only
// its own subjects, and the server-stamped Nats-Request-Info header of a
// registration names the requesting job, so a job cannot register another.
// In none and token mode (localauth.go) jobs share one JOBS account without
// JetStream; the coordinator and the administrator authenticate with
// per-data-directory secrets, never with the job token. In every mode jobs
// cannot publish <prefix>.log.* or call the JetStream API, and coordinator
// records carry unguessable message ids (writes.go): a duplicate ack of
// one is an error. Caps (caps.go) bound jobs in total and per client and
// each job's event rate; TLS (tls.go) and revocation (revoke.go) complete
// it. docs/security.md is the threat model.
//
// # Leadership (leader.go)
//
// One coordinator writes: a leader lease in a KV bucket, taken and renewed
// by compare-and-swap, with an epoch that fences the log (ticks of an older
// epoch are ignored) and every lease. A standby folds the log as it grows
// and takes over after the leader is silent for a ttl; an embedded
// coordinator also holds a flock on its data directory (lock.go). A
// restart with another cluster shape appends a cluster record (resize.go).
//
// # Node agents and submitted jobs (agents.go, runner.go, submit.go)
//
// `shockwave submit` stores a job (command, width, environment, ranks per
// node, retry bound) in the log; Core registers it at once with a
// placeholder registration (Core.Submit) that its process's first
// registration replaces. Submitted jobs are never marked lost. Agents join
// and send heartbeats on <prefix>.agent.<node>.*; a join, a node leaving
// (its heartbeats stopped for ServiceConfig.AgentTimeout) and an agent's
// report that a job's processes exited are log records, folded like the
// rest (Core.JoinNode, Core.LeaveNode; exits: completion, a bounded number
// of restarts as new attempts, then failure with the reason in the job's
// status). The fold derives each node's desired state from the current
// round's RUN leases (protocol.NodeDesired) and the service publishes it on
// <prefix>.node.<node>.desired. AgentPermissions confine an agent to its
// own node's subjects. docs/agent.md describes the whole.
package coordinator
