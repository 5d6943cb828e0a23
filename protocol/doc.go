// Package protocol defines the messages that jobs and the coordinator exchange:
// the events a job sends (register, progress, batch-size change, done) and the
// leases the coordinator returns. Every message is versioned JSON and every field
// is validated; a message that fails validation is rejected with an error that
// names the field, and never changes coordinator state.
//
// The same types are used by the simulator, which sends the coordinator exactly
// the events a real job's SDK would send.
//
// # Wire protocol
//
// Subjects live under a configurable prefix (Subjects, default "shockwave"):
//
//	<prefix>.register         request/reply   Register → RegisterReply
//	<prefix>.job.<id>.events  job → coord.    Batch (captured by a JetStream stream)
//	<prefix>.job.<id>.lease   coord. → job    Lease: RUN / SUSPEND / EXIT, round, GPUs, expiry
//	<prefix>.status           request/reply   StatusRequest (or an empty body) → StatusReply
//
// Every message is one JSON object with a schema version "v" (Version). The
// decoders (DecodeRegister, DecodeBatch, …) read the version first, so a
// message of another version is refused as such; they then decode strictly:
// unknown fields, values of the wrong JSON type, trailing data and messages
// over the size limit are refused, and finally every field is validated
// (finite numbers within generous bounds, ids that are one subject token).
// DecodeBatch, the coordinator's hottest decoder, does all of this in one
// pass over the bytes (scan.go, batch_decode.go) and is tested against the
// multi-pass decoder it replaced; MarshalLease writes json.Marshal's bytes
// for a lease without reflection.
//
// Requests that fail get a reply whose Error names the code and the field;
// event batches are published without a reply, so a bad one is counted and
// dropped by the coordinator.
//
// A job registers (and re-registers after an SDK restart: the reply then
// carries Resumed, the last accepted sequence number and the progress the
// coordinator holds), sends its events in batches with per-job sequence
// numbers strictly increasing from 1, and at least one event per round (a
// progress event with zero steps is a heartbeat): a job silent for the
// coordinator's job timeout is marked lost and its GPUs go to others until
// it sends again. A RUN lease ends at Expiry unless the next round's lease
// renews it (Extension), so a job whose coordinator vanished stops by itself.
//
// This package imports only the standard library.
package protocol
