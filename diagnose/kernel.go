package diagnose

import (
	"net/netip"
	"sort"

	"github.com/hone-llm/hone/schema"
)

// KVConn is one KV-transfer connection as the daemon saw it from the side
// that received the KV blocks (a decode worker pulling from a prefill
// worker): when its bytes started and stopped flowing, and how many.
type KVConn struct {
	PID        int
	Local      string
	Remote     string
	RXBytes    uint64
	FirstNs    int64 // CLOCK_MONOTONIC
	LastNs     int64
	Attributed string // request id it was joined to
}

// ReadKVConns reads a daemon snapshot (hone daemon --once -o FILE, or GET
// /v1/snapshot) and returns its KV-transfer connections on the receiving
// side: those whose remote end is a KV port (the puller's socket).
func ReadKVConns(path string) ([]KVConn, error) {
	s, err := readSnapshot(path)
	if err != nil {
		return nil, err
	}
	return kvConns(s), nil
}

// ParseKVConns decodes a daemon snapshot's KV-transfer connections.
func ParseKVConns(b []byte) ([]KVConn, error) {
	s, err := parseSnapshot(b)
	if err != nil {
		return nil, err
	}
	return kvConns(s), nil
}

// kvConns is snapshot s's KV-transfer connections on the receiving side.
func kvConns(s *schema.Snapshot) []KVConn {
	// Both ends of a loopback connection are in a snapshot; the receiving
	// (pulling) end is the one whose remote port is the listening KV port,
	// i.e. whose local port is not a port any KV socket listens on. A
	// listening port meets a new ephemeral port on every pull, an
	// ephemeral port only its one listener: a port with two or more peers
	// listens. With a single pull in the snapshot, the lower port is taken
	// for the listener (ephemeral ports are usually the high ones).
	peers := map[uint16]map[uint16]bool{}
	for _, c := range s.Connections {
		if !c.KVTransfer {
			continue
		}
		lp, err1 := netip.ParseAddrPort(c.Local)
		rp, err2 := netip.ParseAddrPort(c.Remote)
		if err1 != nil || err2 != nil {
			continue
		}
		for _, e := range [][2]uint16{{lp.Port(), rp.Port()}, {rp.Port(), lp.Port()}} {
			if peers[e[0]] == nil {
				peers[e[0]] = map[uint16]bool{}
			}
			peers[e[0]][e[1]] = true
		}
	}
	listening := map[uint16]bool{}
	for p, ps := range peers {
		if len(ps) >= 2 {
			listening[p] = true
		}
	}
	for p, ps := range peers {
		if len(ps) == 1 {
			for q := range ps {
				if len(peers[q]) == 1 && p < q {
					listening[p] = true
				}
			}
		}
	}
	var out []KVConn
	for _, c := range s.Connections {
		if !c.KVTransfer || c.RXBytes == 0 {
			continue
		}
		rp, err := netip.ParseAddrPort(c.Remote)
		if err != nil {
			continue
		}
		lp, _ := netip.ParseAddrPort(c.Local)
		if listening[lp.Port()] && !listening[rp.Port()] {
			continue // the sending side
		}
		out = append(out, KVConn{PID: c.PID, Local: c.Local, Remote: c.Remote, RXBytes: c.RXBytes,
			FirstNs: int64(c.FirstMonotonicNS), LastNs: int64(c.LastMonotonicNS)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FirstNs < out[j].FirstNs })
	return out
}

// joinKernel gives each disaggregated request the KV connection whose bytes
// started flowing after its decode leg was sent and before its first token:
// the earliest such connection not yet joined, requests taken in the order
// their decode legs were sent. It fills KernelKVBytes and KernelTransferMs
// and, unless the decode worker stated its pull (kv_transfer_time_ms),
// splits its wait at the pull's end (splitKVWait).
func joinKernel(atts []Attribution, windows map[string][2]int64, conns []KVConn, scale float64) {
	used := make([]bool, len(conns))
	for _, i := range bySentTime(atts, windows) {
		w := windows[atts[i].RequestID]
		for k := range conns {
			c := &conns[k]
			if used[k] || c.FirstNs < w[0] || c.FirstNs > w[1] {
				continue
			}
			used[k] = true
			c.Attributed = atts[i].RequestID
			a := &atts[i]
			a.KernelKVBytes = c.RXBytes
			a.KernelTransferMs = float64(c.LastNs-c.FirstNs) / 1e6 / scale
			a.kvLastNs = c.LastNs
			a.Sources["transfer_kernel"] = "daemon: KV connection bytes received (sock_recv_length) and their first/last CLOCK_MONOTONIC times"
			if a.kvSplit == "" {
				// From the decode leg's send (the hop to the worker inside) to
				// the pull's last operation.
				splitKVWait(a, float64(c.LastNs-w[0])/1e6/scale, "the daemon's KV connection (its last operation: the pull acknowledged)")
			}
			break
		}
	}
}

// bySentTime returns the indices of the requests that have a window, in
// the order their windows open (their legs were sent).
func bySentTime(atts []Attribution, windows map[string][2]int64) []int {
	var order []int
	for i, a := range atts {
		if _, ok := windows[a.RequestID]; ok {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(x, y int) bool {
		return windows[atts[order[x]].RequestID][0] < windows[atts[order[y]].RequestID][0]
	})
	return order
}
