package preflight

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/hone-llm/hone/sim"
)

// exerciseChecks: python3 >= 3.10 for submission.py, and the exact
// simulator's objectives on the CPU exercise's public instance (its default
// scan, colocated and disaggregated, prefix cache on) reproduced to the
// last digit (a self-test of this build).
func exerciseChecks(ctx context.Context, python string) []Check {
	var cs []Check
	c := Check{Section: "exercise", Name: "python"}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3]); sys.exit(0 if sys.version_info >= (3, 10) else 3)").CombinedOutput()
	ver := strings.TrimSpace(string(out))
	switch {
	case err == nil:
		c.Status, c.Detail = Pass, "python "+ver
	case ver != "" && strings.Count(ver, ".") == 2:
		c.Status, c.Detail, c.Fix = Fail, "python "+ver+" is older than 3.10", "install Python >= 3.10 (apt-get install python3)"
	default:
		c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("%s: %v", python, err), "install Python >= 3.10 (apt-get install python3); only the exercise bridge needs it"
	}
	cs = append(cs, c)

	self := Check{Section: "exercise", Name: "simulator-golden", Status: Pass}
	col, err1 := sim.Scan(sim.DefaultScan(sim.Config{Mode: sim.Colocated, PrefixCache: true}))
	dis, err2 := sim.Scan(sim.DefaultScan(sim.Config{Mode: sim.Disaggregated, PrefixCache: true}))
	switch {
	case err1 != nil || err2 != nil:
		self.Status, self.Detail = Fail, fmt.Sprintf("simulator error: %v %v", err1, err2)
	case col.Objective != 8.01670146137787 || dis.Objective != 15.91670258978015:
		self.Status, self.Detail = Fail, fmt.Sprintf("objectives %v / %v, want the public instance's 8.01670146137787 / 15.91670258978015", col.Objective, dis.Objective)
		self.Fix = "this build of hone is broken: rebuild from a clean checkout"
	default:
		self.Detail = "public-instance objectives 8.01670146137787 (colocated) and 15.91670258978015 (disaggregated) reproduced"
	}
	return append(cs, self)
}
