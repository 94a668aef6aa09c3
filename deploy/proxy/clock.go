package proxy

import (
	"github.com/hone-llm/hone/internal/monoclock"
	"github.com/hone-llm/hone/schema"
)

// Stamp is one instant on two clocks (schema.Stamp, as a timeline carries
// it).
type Stamp = schema.Stamp

func now() Stamp { return Stamp(monoclock.Now()) }
