/*
 * shockwave.h — C interface of libshockwave.so, the Shockwave job SDK.
 *
 * Build the library with `make lib` (or, without make,
 *   go build -buildmode=c-shared -o bindings/libshockwave.so ./bindings
 * from the repository root). Link with -lshockwave, or load it at run time
 * (dlopen, Python ctypes: see bindings/python).
 *
 * # Model
 *
 * A job registers with the coordinator (shockwave_open) and gets an opaque
 * handle: a positive integer, never reused within a process. Every function
 * takes the handle and returns a status: SHOCKWAVE_OK (0), a positive status
 * that tells the caller what to do next, or a negative error. After an
 * error, shockwave_last_error(handle, ...) gives a message that names the
 * problem. Functions are safe to call from several threads at once; the
 * library serialises the calls on one handle.
 *
 * The library never calls back into the caller. The training loop reads the
 * lease state from the job's control block (shockwave_control) at every
 * iteration, and crosses into the library only when that state is not
 * SHOCKWAVE_LEASE_RUN, at an epoch end, a batch-size change, and to close:
 *
 *   shockwave_control *cb;
 *   shockwave_open(config_json, &h);
 *   shockwave_control_block(h, &cb);
 *   for (;;) {
 *       if (cb->lease != SHOCKWAVE_LEASE_RUN) {
 *           int s = shockwave_boundary(h);
 *           if (s == SHOCKWAVE_SUSPEND) { save_checkpoint(); }
 *           if (s == SHOCKWAVE_PREEMPTED) { save_checkpoint(); exit(0); }
 *           if (s == SHOCKWAVE_ENDED) break;
 *           if (s == SHOCKWAVE_SUSPEND || s == SHOCKWAVE_WAIT) {
 *               while ((s = shockwave_wait_run(h, 500)) == SHOCKWAVE_TIMEOUT) {}
 *               if (s == SHOCKWAVE_ENDED) break;
 *               if (s == SHOCKWAVE_RESUME) restore_checkpoint();
 *           }
 *           if (s < 0) fail(h);
 *       }
 *       train_one_step();
 *       cb->steps++;                       (one writer thread)
 *       if (end_of_epoch) shockwave_epoch(h);
 *   }
 *   shockwave_finish(h);                   (the job completed its work)
 *   shockwave_close(h);
 *
 * A goroutine of the library samples cb->steps a few times per second and
 * reports progress (steps, samples at the current batch size, elapsed time
 * while the loop is active) to the coordinator.
 *
 * # Fork
 *
 * A process that forks after loading the library keeps working in the
 * parent. In the child every function returns SHOCKWAVE_ERR_FORKED at once,
 * without entering the Go runtime (whose threads do not survive a fork), and
 * shockwave_last_error explains. The child may still read a control block.
 *
 * # Strings
 *
 * Functions that return text (shockwave_last_error, shockwave_lease,
 * shockwave_state) write at most cap bytes, including a terminating NUL,
 * into buf, like snprintf, and report the full length through *len
 * (excluding the NUL): when *len >= cap the text was cut; call again with a
 * buffer of *len + 1 bytes. Text is UTF-8; structured text is JSON.
 */
#ifndef SHOCKWAVE_H
#define SHOCKWAVE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this interface; shockwave_abi_version returns the library's. */
#define SHOCKWAVE_ABI_VERSION 2

/* ---- Statuses ------------------------------------------------------------ */

/* Success; from shockwave_boundary and shockwave_wait_run: RUN, keep training. */
#define SHOCKWAVE_OK 0
/* shockwave_boundary: the job lost its lease. Save a checkpoint and release
 * the GPUs (the "suspend hook"), then call shockwave_wait_run. Returned once
 * per suspension. */
#define SHOCKWAVE_SUSPEND 1
/* shockwave_wait_run: a RUN lease ended a suspension. Take the GPUs back and
 * restore the checkpoint (the "resume hook"), then keep training. */
#define SHOCKWAVE_RESUME 2
/* shockwave_wait_run: no RUN lease within the timeout; call again. */
#define SHOCKWAVE_TIMEOUT 3
/* The coordinator ended the job (EXIT lease), or it finished: stop for good. */
#define SHOCKWAVE_ENDED 4
/* shockwave_boundary in EXIT mode: the job lost its lease. Save a checkpoint
 * and exit; a launcher restarts the process, which registers again with the
 * same job id and resumes. */
#define SHOCKWAVE_PREEMPTED 5
/* shockwave_boundary: no RUN lease yet and nothing to suspend (the job has
 * not run since it registered or resumed): call shockwave_wait_run. */
#define SHOCKWAVE_WAIT 6

/* Errors. shockwave_last_error(handle) gives the message. */
#define SHOCKWAVE_ERR_INVALID -1 /* a bad argument: config, size, NULL pointer */
#define SHOCKWAVE_ERR_HANDLE -2  /* no such handle (never opened, or closed) */
#define SHOCKWAVE_ERR_FORKED -3  /* called in a child forked after the library loaded */
#define SHOCKWAVE_ERR_CONNECT -4 /* the coordinator could not be reached in time */
#define SHOCKWAVE_ERR_REFUSED -5 /* the coordinator refused the registration */
#define SHOCKWAVE_ERR_CLOSED -6  /* the job was finished or closed: call not allowed */
#define SHOCKWAVE_ERR_INTERNAL -7
#define SHOCKWAVE_ERR_RANK_LOST -8 /* a rank of a multi-process job was lost: exit
                                    * non-zero; every rank restarts from the checkpoint */

/* ---- Control block ------------------------------------------------------- */

/* Values of shockwave_control.lease. Anything but RUN means: call
 * shockwave_boundary before the next step. */
#define SHOCKWAVE_LEASE_RUN 0     /* a RUN lease holds: train */
#define SHOCKWAVE_LEASE_PENDING 1 /* registered, no RUN lease yet */
#define SHOCKWAVE_LEASE_SUSPEND 2 /* the lease was withdrawn or expired */
#define SHOCKWAVE_LEASE_EXIT 3    /* the coordinator ended the job */
#define SHOCKWAVE_LEASE_CLOSED 4  /* finished or closed locally */

#define SHOCKWAVE_CONTROL_MAGIC 0x42435753u /* "SWCB" little-endian */

/*
 * The per-job control block: C memory owned by the library. It stays valid
 * until the process exits, even after shockwave_close (its lease then reads
 * SHOCKWAVE_LEASE_CLOSED), so that a thread still reading it never touches
 * freed memory; it costs 64 bytes per job opened. Fields are naturally aligned
 * 32- and 64-bit words, so plain loads and stores are atomic on every
 * platform Go supports; the library accesses them atomically.
 *
 * Written by the library, read by the caller: magic, version, lease,
 * lease_seq, batch_size, gate, rank, world. Written by the caller (one
 * thread), read by the library: steps, active.
 *
 * Layout version 2 adds gate, rank and world (in what version 1 reserved).
 * In a multi-process job (world > 1) the ranks agree on the step at which
 * they all stop (see the Go SDK's package doc, "Multi-process jobs"); gate
 * is the next step at which the loop must cross into the library even
 * though lease reads RUN, so the per-step check becomes
 *
 *   if (cb->lease != SHOCKWAVE_LEASE_RUN || cb->steps >= cb->gate) ...
 *
 * There shockwave_boundary may return SHOCKWAVE_SUSPEND or
 * SHOCKWAVE_PREEMPTED while lease still reads RUN (the agreed stop step),
 * may block on a rank other than 0 until rank 0 releases more steps
 * (bounded by the rank timeout), and returns SHOCKWAVE_ERR_RANK_LOST when
 * the agreement broke.
 */
typedef struct shockwave_control {
    uint32_t magic;              /* SHOCKWAVE_CONTROL_MAGIC */
    uint32_t version;            /* layout version: 1 */
    volatile int32_t lease;      /* SHOCKWAVE_LEASE_* */
    volatile int32_t batch_size; /* the batch size the library reports */
    volatile uint64_t lease_seq; /* incremented at every change of lease */
    volatile uint64_t steps;     /* iterations done since open (caller increments) */
    volatile int32_t active;     /* 1 while the loop trains: elapsed time counts */
    int32_t reserved0;
    volatile uint64_t gate;      /* call shockwave_boundary when steps >= gate, even under
                                  * RUN (version 2; UINT64_MAX for a single-process job) */
    int32_t rank;                /* this process's rank (version 2) */
    int32_t world;               /* the job's number of processes, 1 unless multi-rank */
    uint64_t reserved[2];
} shockwave_control;

/* ---- Functions ----------------------------------------------------------- */

/* The library's SHOCKWAVE_ABI_VERSION. Never fails, never enters Go. */
int shockwave_abi_version(void);

/*
 * Registers a job and connects to the coordinator; blocks until the
 * coordinator answers (retrying up to "register_timeout" seconds).
 * config_json is one JSON object (unknown keys are errors):
 *
 *   url               NATS URL(s) of the coordinator (default $SHOCKWAVE_NATS_URL,
 *                     else nats://127.0.0.1:4222)
 *   creds, token      per-job credentials file, shared token (defaults from
 *                     $SHOCKWAVE_CREDS, $SHOCKWAVE_TOKEN)
 *   tls_ca            CA file (PEM) of the coordinator's TLS certificate
 *                     (default $SHOCKWAVE_TLS_CA)
 *   tls_cert, tls_key client certificate and key (PEM) for a server that
 *                     requires them; both or neither (default
 *                     $SHOCKWAVE_TLS_CERT, $SHOCKWAVE_TLS_KEY)
 *   prefix            subject prefix (default "shockwave")
 *   job, name         job id (default $SHOCKWAVE_JOB_ID, else derived from name)
 *   model             model family (required)
 *   adaptation        "static", "gns" or "accordion"
 *   workers           GPUs per round (default 1)
 *   batch_size        initial batch size (required)
 *   dataset_size      samples per epoch (required)
 *   epochs | samples | total_steps   the job's length (exactly one)
 *   schedule          {"batch_sizes": [...], "epoch_seconds": [...]}
 *   priority, throughput, isolated_seconds
 *   resume            progress saved with a checkpoint (shockwave_state's JSON)
 *   exit_mode         true: SHOCKWAVE_PREEMPTED instead of SUSPEND (default
 *                     $SHOCKWAVE_EXIT_MODE == "1")
 *   sample_interval   seconds between progress samples (default: a quarter round)
 *   register_timeout  seconds (default 30)
 *   rank, world_size  this process's rank of a multi-process job (default $RANK,
 *                     $WORLD_SIZE as torchrun sets them); rank 0 registers, the
 *                     others attach to the same job id
 *   local_rank        the rank's index on its node (default $LOCAL_RANK)
 *   rank_timeout      seconds a rank may be silent before the others stop (default 10)
 *   rank_join_timeout seconds every rank has to join (default 120)
 *   node              the node a resident process lives on (default $SHOCKWAVE_NODE,
 *                     not in EXIT mode); the coordinator grants devices there only
 *   visible_devices   the local device indices the process can use on node
 *   agent_socket      path of the node agent's job socket (default
 *                     $SHOCKWAVE_AGENT_SOCKET): a single-process job the agent did
 *                     not start sends through it instead of NATS, resident on the
 *                     agent's node; unreachable or refused: NATS, with a log line
 *
 * On success *handle is the new handle. On failure *handle is 0 and
 * shockwave_last_error(0, ...) gives the message (handle 0 holds the error of
 * the most recent failed open in the process).
 */
int shockwave_open(const char *config_json, int64_t *handle);

/* Stores the job's control block in *block. */
int shockwave_control_block(int64_t handle, shockwave_control **block);

/*
 * Decides what the loop does at an iteration boundary whose control block
 * says anything but RUN. Returns SHOCKWAVE_OK (a RUN lease holds),
 * SHOCKWAVE_SUSPEND, SHOCKWAVE_PREEMPTED (EXIT mode), SHOCKWAVE_WAIT or
 * SHOCKWAVE_ENDED. Does not block.
 */
int shockwave_boundary(int64_t handle);

/*
 * Blocks until a RUN lease arrives, the job ends, or timeout_ms passes
 * (timeout_ms < 0: no limit). Returns SHOCKWAVE_RESUME (run the resume hook),
 * SHOCKWAVE_OK (RUN, nothing to restore: the first lease), SHOCKWAVE_TIMEOUT
 * or SHOCKWAVE_ENDED. Other threads may call into the same handle meanwhile.
 */
int shockwave_wait_run(int64_t handle, int64_t timeout_ms);

/* Reports an epoch end: the samples of the epoch are done. */
int shockwave_epoch(int64_t handle);

/* Adopts a new batch size (Accordion, GNS): steps counted from now on are
 * of batch_size samples; the coordinator rescales the job's remaining work. */
int shockwave_set_batch_size(int64_t handle, int64_t batch_size);

/* Writes the current lease as JSON (protocol.Lease; "{}" before the first). */
int shockwave_lease(int64_t handle, char *buf, size_t cap, size_t *len);

/* Writes the RUN lease this process trains under as JSON (protocol.Lease
 * with its per-node "devices"; for a multi-process job, the lease of the
 * running generation), or "{}" while it holds none. Call it on resume to
 * learn which devices to use. */
int shockwave_grant(int64_t handle, char *buf, size_t cap, size_t *len);

/* Writes the job's progress as JSON, to save with a checkpoint and pass back
 * as "resume" when a restarted process opens the job again. */
int shockwave_state(int64_t handle, char *buf, size_t cap, size_t *len);

/* Reports that the job completed its work. The lease becomes CLOSED. */
int shockwave_finish(int64_t handle);

/* Flushes pending events (bounded wait), disconnects and forgets the
 * handle; the control block's lease becomes SHOCKWAVE_LEASE_CLOSED. The
 * coordinator keeps the job unless it finished: a process that opens it
 * again resumes it. */
int shockwave_close(int64_t handle);

/*
 * The message of the most recent error on handle (of the most recent failed
 * shockwave_open for handle 0, of the fork for any handle in a forked child);
 * "" when there was none. Returns SHOCKWAVE_OK, or SHOCKWAVE_ERR_INVALID when
 * len is NULL. See "Strings" above.
 */
int shockwave_last_error(int64_t handle, char *buf, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* SHOCKWAVE_H */
