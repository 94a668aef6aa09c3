package schema

import (
	"encoding/json"
)

// The proxy's request timelines (GET /hone/timeline, hone proxy): package
// deploy/proxy writes them, package diagnose reads them. Stamps join with
// the daemon's snapshot on CLOCK_MONOTONIC.

// Leg is one upstream call.
type Leg struct {
	Worker   string `json:"worker"`
	Sent     Stamp  `json:"sent"`
	Answered *Stamp `json:"answered,omitempty"` // response headers (prefill: the whole reply)
	Status   int    `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
	// EngineMetrics is the prefill reply's per-request "metrics" object
	// (vLLM --enable-per-request-metrics), kept so diagnose can split the
	// prefill leg into the engine's queue, its prefill and the hops.
	EngineMetrics json.RawMessage `json:"engine_metrics,omitempty"`
}

// Timeline is one request's path through the proxy. Colocated requests have
// no Prefill legs; their one streaming leg is Decode.
type Timeline struct {
	Seq       uint64 `json:"seq"` // order of completion, for ?since=
	RequestID string `json:"request_id"`
	Path      string `json:"path"`
	Received  Stamp  `json:"received"`
	Prefill   []Leg  `json:"prefill,omitempty"`
	Decode    *Leg   `json:"decode,omitempty"`
	FirstByte *Stamp `json:"first_byte,omitempty"` // first body byte written to the client
	LastByte  *Stamp `json:"last_byte,omitempty"`
	Outcome   string `json:"outcome"`
	Retries   int    `json:"retries"`
	Status    int    `json:"status"` // HTTP status sent to the client
	Error     string `json:"error,omitempty"`
}

// TimelinePage is the proxy's GET /hone/timeline answer.
type TimelinePage struct {
	Timelines []Timeline `json:"timelines"`
	// Next is the cursor for the next call (?since=Next).
	Next uint64 `json:"next"`
	// Dropped counts timelines that left the ring before they were read.
	Dropped uint64            `json:"dropped"`
	Counts  map[string]uint64 `json:"counts"`
}
