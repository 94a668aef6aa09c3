package replay

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hone-llm/hone/schema"
)

// An endpoint that says it is hone's emulator is never measured as a
// device.
func TestDeviceKindRefusesTheEmulator(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			w.Write([]byte(`{"version":"hone-emulator/v0.1"}`))
		case "/v1/models":
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	rec, err := Run(context.Background(), Options{Endpoint: srv.URL, Model: "m", Kind: schema.KindDevice, QPS: []float64{1}})
	var pe *ParamError
	if !errors.As(err, &pe) || pe.Field != "kind" || rec != nil {
		t.Fatalf("err %v (record %v), want a ParamError on kind and no record", err, rec != nil)
	}
}
