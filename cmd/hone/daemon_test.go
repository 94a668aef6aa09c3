package main

import (
	"strings"
	"testing"
)

// A --listen address that is not loopback is refused, exit 2, naming the
// flag and why, unless --allow-remote is given; so is an unknown --user.
func TestDaemonRefusesRemoteListen(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9464", ":9464", "[::]:9464", "10.0.0.1:9464"} {
		_, errs, code := runCLI(t, "", "daemon", "--listen", addr)
		if code != exitBadInput || !strings.Contains(errs, "--listen "+addr) || !strings.Contains(errs, "no authentication") ||
			!strings.Contains(errs, "command lines") || !strings.Contains(errs, "--allow-remote") {
			t.Errorf("--listen %s: exit %d\n%s", addr, code, errs)
		}
	}
	if _, errs, code := runCLI(t, "", "daemon", "--once", "--listen", "0.0.0.0:0"); code != exitBadInput {
		t.Errorf("--once --listen 0.0.0.0:0: exit %d\n%s", code, errs)
	}
	// --allow-remote needs a bearer token file.
	if _, errs, code := runCLI(t, "", "daemon", "--listen", "0.0.0.0:9464", "--allow-remote"); code != exitBadInput || !strings.Contains(errs, "--token-file") {
		t.Errorf("--allow-remote without --token-file: exit %d\n%s", code, errs)
	}
	if _, errs, code := runCLI(t, "", "daemon", "--user", "no-such-user-here"); code != exitBadInput || !strings.Contains(errs, "--user") {
		t.Errorf("--user no-such-user-here: exit %d\n%s", code, errs)
	}
}
