package daemon

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the daemon's local API:
//
//	/metrics          Prometheus exposition (own registry)
//	/v1/snapshot      the whole Snapshot as JSON
//	/v1/connections   the connections; ?kv=true for KV transfers only, ?pid=N
//	/v1/threads       the threads; ?pid=N for one process
//	/v1/steps         the engine steps; ?pid=N, ?since_ns=T (ended after T)
//	/v1/exchanges     the HTTP exchanges on API ports; ?pid=N, ?since_ns=T
//	                  (last received or sent after T)
//	/v1/profile       pprof profile of traced time; ?view=syscalls|sched|cuda
//
// Bind it to loopback: it has no authentication.
func Handler(src func() *Snapshot) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(NewRegistry(src), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/snapshot", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, src())
	})
	mux.HandleFunc("GET /v1/connections", func(w http.ResponseWriter, r *http.Request) {
		pid, ok := pidParam(w, r)
		if !ok {
			return
		}
		kvOnly := r.URL.Query().Get("kv") == "true"
		out := []Connection{}
		for _, c := range src().Connections {
			if (pid == 0 || c.PID == pid) && (!kvOnly || c.KVTransfer) {
				out = append(out, c)
			}
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/threads", func(w http.ResponseWriter, r *http.Request) {
		pid, ok := pidParam(w, r)
		if !ok {
			return
		}
		out := []Thread{}
		for _, t := range src().Threads {
			if pid == 0 || t.PID == pid {
				out = append(out, t)
			}
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /v1/steps", timedList(src, func(s *Snapshot) []Step { return s.Steps },
		func(s Step) (int, uint64) { return s.PID, s.EndMonotonicNS }))
	mux.HandleFunc("GET /v1/exchanges", timedList(src, func(s *Snapshot) []Exchange { return s.Exchanges },
		func(x Exchange) (int, uint64) { return x.PID, max(x.RequestEndMonotonicNS, x.LastSendMonotonicNS) }))
	mux.HandleFunc("GET /v1/profile", func(w http.ResponseWriter, r *http.Request) {
		view := r.URL.Query().Get("view")
		if view == "" {
			view = ViewSyscalls
		}
		if err := checkView(view); err != nil {
			http.Error(w, "view: "+err.Error(), http.StatusBadRequest)
			return
		}
		p, err := Profile(src(), view)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		// view is one of Views here, never the raw parameter.
		w.Header().Set("Content-Disposition", `attachment; filename="hone-`+view+`.pb.gz"`)
		_ = p.Write(w)
	})
	return mux
}

func pidParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.URL.Query().Get("pid")
	if s == "" {
		return 0, true
	}
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		http.Error(w, "pid: want a positive integer, got "+strconv.Quote(s), http.StatusBadRequest)
		return 0, false
	}
	return pid, true
}

// timedList serves a snapshot's list filtered by ?pid=N and ?since_ns=T:
// the items of process N whose last instant (of) is after T.
func timedList[T any](src func() *Snapshot, list func(*Snapshot) []T, of func(T) (pid int, lastNS uint64)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pid, ok := pidParam(w, r)
		since, ok2 := sinceParam(w, r)
		if !ok || !ok2 {
			return
		}
		out := []T{}
		for _, it := range list(src()) {
			if p, last := of(it); (pid == 0 || p == pid) && last > since {
				out = append(out, it)
			}
		}
		writeJSON(w, out)
	}
}

// sinceParam reads ?since_ns= (0 when absent).
func sinceParam(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	v := r.URL.Query().Get("since_ns")
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		http.Error(w, "since_ns: want CLOCK_MONOTONIC nanoseconds, got "+strconv.Quote(v), http.StatusBadRequest)
		return 0, false
	}
	return n, true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
