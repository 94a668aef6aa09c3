//go:build linux

package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hone-llm/hone/internal/usage"
)

// cliOptions are hone daemon's flag defaults.
func cliOptions() Options {
	return Options{
		Config:  Config{BurstGap: 100 * time.Millisecond, SyscallSample: 16, SyscallTimingWindow: time.Second, SyscallTimingPeriod: 8 * time.Second},
		Run:     RunOptions{Listen: "127.0.0.1:9464", Duration: 10 * time.Second, User: DefaultUser},
		KVPorts: DefaultKVPorts, HTTPPorts: DefaultHTTPPorts, CUDALaunches: "always",
		NVMLPeriod: time.Second, ScanPeriod: time.Second,
	}
}

// fakePods is a PodSource whose watch fails, after noting the query.
type fakePods struct{ watched *PodQuery }

func (fakePods) CheckSelector(s string) error {
	if strings.Contains(s, "(") && !strings.Contains(s, ")") {
		return errors.New("unclosed parenthesis")
	}
	return nil
}

func (f fakePods) Watch(_ context.Context, q PodQuery) (PodSet, error) {
	*f.watched = q
	return nil, errors.New("no cluster here")
}

// The defaults pass and state the Config and RunOptions: scheduling
// traced, privileges dropped, the ports parsed.
func TestOptionsCheckDefaults(t *testing.T) {
	o := cliOptions()
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	if !o.Config.Sched || !o.Run.DropCaps || len(o.Config.KVPorts) == 0 || len(o.Config.HTTPPorts) == 0 || o.Config.Pods != nil ||
		o.Config.NVMLPeriod != time.Second || o.Config.ScanPeriod != time.Second {
		t.Errorf("checked defaults: %+v %+v", o.Config, o.Run)
	}
	o = cliOptions()
	o.NoSched, o.KeepCaps = true, true
	if err := o.check(); err != nil || o.Config.Sched || o.Run.DropCaps {
		t.Errorf("--no-sched --keep-capabilities: sched %t drop %t, err %v", o.Config.Sched, o.Run.DropCaps, err)
	}
}

// Bad flags are the caller's (usage.Error), named in the message.
func TestOptionsCheckRefuses(t *testing.T) {
	for want, edit := range map[string]func(*Options){
		"--match-cmdline":       func(o *Options) { o.Match = "(" },
		"--kv-ports":            func(o *Options) { o.KVPorts = "5600-10" },
		"--http-ports":          func(o *Options) { o.HTTPPorts = "8000,0" },
		"--duration":            func(o *Options) { o.Run.Once, o.Run.Duration = true, 0 },
		"--listen 0.0.0.0:9464": func(o *Options) { o.Run.Listen = "0.0.0.0:9464" },
		"--api-max-connections": func(o *Options) { o.Run.API.MaxConnections = -1 },
		"--user":                func(o *Options) { o.Run.User = "-1" },
		"negative":              func(o *Options) { o.ScanPeriod = -time.Second },
		"--syscall-sample":      func(o *Options) { o.Config.SyscallSample = 3 },
		"need --pod-selector":   func(o *Options) { o.Pods.Namespace = "llm" },
		"--pod-selector":        func(o *Options) { o.Pods = PodQuery{Selector: "a in (b", Node: "gpu-1"} },
		"--node-name: empty":    func(o *Options) { o.Pods = PodQuery{Selector: "a=b"} },
		"--pid 0":               func(o *Options) { o.Config.PIDs = []int{0} },
	} {
		o := cliOptions()
		o.PodSource = fakePods{new(PodQuery)}
		edit(&o)
		err := o.check()
		if !errors.As(err, new(usage.Error)) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want a usage.Error naming it", want, err)
		}
	}
}

// With --pod-selector the pods are watched before the daemon starts; a
// watch that fails stops the command with its error.
func TestCommandWatchesPods(t *testing.T) {
	o := cliOptions()
	var q PodQuery
	o.PodSource, o.Log = fakePods{&q}, new(strings.Builder)
	o.Pods = PodQuery{Selector: "hone.dev/pool=decode", Namespace: "llm", Node: "gpu-1", Kubeconfig: "kc"}
	err := Command(context.Background(), o)
	if err == nil || err.Error() != "no cluster here" || q != o.Pods {
		t.Errorf("Command: err %v, watched %+v; want the watch's error after watching %+v", err, q, o.Pods)
	}
}
