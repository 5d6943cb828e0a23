// Package agent is the node agent of `shockwave agent`: it joins the
// coordinator as one node (name, GPU count, GPU type), sends heartbeats,
// and makes the processes on its node match the node's desired state, in
// the shape of the kubelet's syncPod and nomad's client alloc runner. It
// never decides what runs where; the coordinator does (docs/agent.md).
//
// For every assignment of the desired state (a submitted job granted
// devices on this node) the agent starts the job's command — one process,
// or one per rank — with CUDA_VISIBLE_DEVICES set to the granted local
// devices, the job's identity (SHOCKWAVE_JOB_ID, SHOCKWAVE_NATS_URL,
// SHOCKWAVE_EXIT_MODE=1, SHOCKWAVE_CHECKPOINT_DIR, credentials) and rank
// variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT). Each process leads its own process group, and dies with
// the agent (Linux parent-death signal). A run is identified by (job,
// attempt, since): a job suspended and granted again, or restarted after a
// failure, gets new processes that resume from its checkpoint.
//
// Lease enforcement: a process still running past its grant's expiry plus
// ExpiryGrace gets SIGTERM (its whole process group), and SIGKILL after
// KillGrace. The clock is the coordinator's, carried in the desired state
// (Now, Expiry) and measured from when the agent received it, so skewed
// clocks between machines do not matter. A device is given to a new run
// only when no process of an older run holds it any more.
//
// Lease relay (Config.NoRelay false, the default): every process gets a
// pipe as descriptor 3, named by $SHOCKWAVE_LEASE_FD="3:<inode>", and the
// agent writes into it the RUN lease the coordinator put in the job's
// assignment whenever it changes, and one SUSPEND lease when the run
// leaves the desired state, through a per-process writer that keeps only
// the latest lease and so never blocks the agent (relay.go).
//
// Uplink (Config.NoUplink false, the default, under the relay): each
// process of a single-process job also gets one end of a Unix socket pair
// as descriptor 4, named by $SHOCKWAVE_UPLINK_FD="4:<inode>"; the agent
// forwards the registrations and event batches the process writes into it
// over its own NATS connection (subjects agent.<node>.register and
// agent.<node>.events), answers registrations and flushes, and writes
// "reconnected" when its connection came back after an outage, so that
// the process needs no connection of its own (uplink.go).
//
// When every process of a run has exited, the agent reports the run's
// exit status (the first non-zero one, else 0); the coordinator decides
// whether that was a failure to retry, a completion, or the expected end
// of a suspended run.
package agent
