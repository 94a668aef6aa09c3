package replay

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"testing"
)

// A record's config is schema.Config, a map with typed views: reading a
// record and writing it again gives its bytes back, config included, and
// the views read the deployment spec's sections.
func TestRecordConfigRoundTrip(t *testing.T) {
	const path = "../optimizer/testdata/regret/4gpu-8k-inputs/grid/disagg-1p2d-tp2.1-nocache-roundrobin.json.gz"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	want, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := EncodeRecord(&got, rec); err != nil {
		t.Fatal(err)
	}
	got.WriteByte('\n')
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("%s: read and written again, the record's bytes differ (%d bytes, want %d)", path, got.Len(), len(want))
	}
	topo, ok, err := rec.Config.Topology()
	if err != nil || !ok || topo.Kind != "disaggregated" || topo.Prefill == nil || topo.Decode == nil || topo.Decode.Replicas != 2 {
		t.Errorf("config.topology: %+v, %v, %v", topo, ok, err)
	}
	knobs, err := rec.Config.Knobs()
	if err != nil || knobs.PrefixCaching == nil || *knobs.PrefixCaching {
		t.Errorf("config.knobs: %+v, %v", knobs, err)
	}
}
