package diagnose

import (
	"fmt"
	"strings"
	"testing"
)

// snapshot renders a daemon snapshot with both ends of each loopback pull
// from the KV port listen to the given ephemeral ports: the puller's end
// receives 1000 bytes, the sender's end the 118-byte request and ack.
func snapshot(listen int, ephemeral ...int) []byte {
	var conns []string
	for i, e := range ephemeral {
		conns = append(conns,
			fmt.Sprintf(`{"pid":2,"local":"127.0.0.1:%d","remote":"127.0.0.1:%d","kv_transfer":true,"rx_bytes":1000,"first_monotonic_ns":%d,"last_monotonic_ns":%d}`, e, listen, 10*i+1, 10*i+2),
			fmt.Sprintf(`{"pid":1,"local":"127.0.0.1:%d","remote":"127.0.0.1:%d","kv_transfer":true,"rx_bytes":118,"first_monotonic_ns":%d,"last_monotonic_ns":%d}`, listen, e, 10*i+1, 10*i+3))
	}
	return []byte(`{"schema_version":1,"clock":"CLOCK_MONOTONIC","connections":[` + strings.Join(conns, ",") + `]}`)
}

// TestParseKVConnsPullerSide: only the pulling ends come back, whether the
// listening port is below or above the ephemeral ones (a test picks any
// free port for it).
func TestParseKVConnsPullerSide(t *testing.T) {
	for _, c := range []struct {
		name      string
		listen    int
		ephemeral []int
	}{
		{"listener-low", 5600, []int{40001, 40002, 40003}},
		{"listener-high", 60123, []int{40001, 40002, 40003}},
		{"single-pull", 5600, []int{40001}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseKVConns(snapshot(c.listen, c.ephemeral...))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.ephemeral) {
				t.Fatalf("%d connections, want %d: %+v", len(got), len(c.ephemeral), got)
			}
			for i, g := range got {
				if g.RXBytes != 1000 || g.PID != 2 || g.Remote != fmt.Sprintf("127.0.0.1:%d", c.listen) {
					t.Errorf("connection %d: %+v, want the puller's end", i, g)
				}
			}
		})
	}
}
