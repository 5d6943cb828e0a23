package protocol

// DiffBatchDecoders exposes the differential check to the external tests
// that capture real SDK batches (they import the SDK, which imports this
// package, so they cannot live inside it).
var DiffBatchDecoders = diffBatchDecoders

// OracleDecodeBatch is the old three-pass DecodeBatch, for benchmarks.
var OracleDecodeBatch = oracleDecodeBatch
