// Package protocol defines the messages that jobs and the coordinator exchange:
// the events a job sends (register, progress, batch-size change, done) and the
// leases the coordinator returns. Every message is versioned JSON and every field
// is validated; a message that fails validation is rejected with an error that
// names the field, and never changes coordinator state.
//
// The same types are used by the simulator, which sends the coordinator exactly
// the events a real job's SDK would send (DESIGN.md, "Data flow").
//
// This package imports only the standard library.
package protocol
