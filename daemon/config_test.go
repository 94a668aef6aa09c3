package daemon

import "testing"

func TestParsePorts(t *testing.T) {
	got, err := ParsePorts("5602, 5600-5601,5602,80")
	if err != nil || len(got) != 4 || got[0] != 80 || got[3] != 5602 {
		t.Errorf("ParsePorts = %v, %v", got, err)
	}
	for _, bad := range []string{"0", "70000", "10-5", "x"} {
		if _, err := ParsePorts(bad); err == nil {
			t.Errorf("ParsePorts(%q) accepted", bad)
		}
	}
	def, _ := ParsePorts(DefaultKVPorts)
	if def[0] != 5600 {
		t.Errorf("default KV ports start at %d, want vLLM's NIXL 5600", def[0])
	}
}
