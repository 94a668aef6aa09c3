// Package schema holds the wire types that cross packages: the run record
// (Record, RunRecord, LevelRecord, RequestRecord, WorkloadRecord and what
// they embed), its Kind, the verdict reasons as one rule table (Rules),
// the engine's per-request metrics with their one decoder
// (DecodeEngineMetrics), the deployment config a record carries, and the
// JSON Schema generated from these types (record.schema.json).
//
// It is a leaf: it imports the standard library and package slo only, so
// that every package, the emulator included, can speak the record's
// language without importing the load generator.
package schema
