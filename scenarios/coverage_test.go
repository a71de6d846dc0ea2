package scenarios

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"pgregory.net/rapid"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/sim"
)

// allCheckpoints are every checkpoint the ha package names, each listed in
// the table whether reached or not.
var allCheckpoints = func() []string {
	var out []string
	for _, cp := range slices.Concat(ha.UpCheckpoints, ha.JoinCheckpoints, ha.RejoinCheckpoints, ha.RestoreCheckpoints, ha.ResetCheckpoints,
		[]string{ha.CheckpointBeforeCertsWrite, ha.CheckpointRenewAfterLeaves, ha.CheckpointRenewAfterKubeconfigs}) {
		if !slices.Contains(out, cp) {
			out = append(out, cp)
		}
	}
	return out
}()

// coverage counts, over a run of the package, what the properties exercised:
// every checkpoint (reached, crashed at, failed at, paused at), every fault
// kind and action (times drawn), and every invariant (times checked), so an
// unexplored corner shows as a zero. `make explore` prints it at the end.
type coverage struct {
	mu sync.Mutex
	// rows by section, then by "property: name".
	counts map[string]map[string]int
	// required are the actions each property must run at least once in a
	// run of it ("property: action").
	required []string
}

var explored = &coverage{counts: map[string]map[string]int{}}

// Sections of the table.
const (
	secCheckpoint = "checkpoint"
	secFault      = "fault"
	secAction     = "action"
	secInvariant  = "invariant"
	secHistory    = "client history"
	// secTime is where a property's time went, in milliseconds: each check
	// whole, and each drawn action (rapid's check after every step as
	// "check"); what the actions leave of the whole is the cluster's
	// start, the fixed prologue and the end.
	secTime = "time"
)

func (c *coverage) add(section, row string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts[section] == nil {
		c.counts[section] = map[string]int{}
	}
	c.counts[section][row] += n
}

// count returns one row's count.
func (c *coverage) count(section, row string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[section][row]
}

// property is the running property's short name.
func currentProperty() string {
	name, _ := runningTest.Load().(string)
	return strings.TrimPrefix(name, "Test")
}

// history counts a checked client history's operations by outcome.
func (c *coverage) history(workload string, ops, unknown, neverHeld, dropped int, result string) {
	prop := currentProperty()
	if prop == "" {
		return
	}
	row := prop + ": " + workload + " "
	c.add(secHistory, row+"operations checked", ops)
	c.add(secHistory, row+"writes of unknown outcome kept", unknown)
	c.add(secHistory, row+"writes of unknown outcome never held", neverHeld)
	c.add(secHistory, row+"operations failed without effect", dropped)
	c.add(secHistory, row+"histories "+result, 1)
}

// invariant counts one check of the named invariant by the running property.
func (c *coverage) invariant(name string) {
	if currentProperty() == "" {
		return // a unit test of the harness, not a property
	}
	c.add(secInvariant, currentProperty()+": "+name, 1)
}

// ran counts an action run outside rapid's Repeat (a check's fixed
// prologue).
func (c *coverage) ran(action string) {
	c.add(secAction, currentProperty()+": "+action, 1)
}

// require names actions prop must run at least once whenever it runs: the
// run fails otherwise (missing).
func (c *coverage) require(prop string, actions ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range actions {
		c.required = append(c.required, prop+": "+a)
	}
}

// missing are the required actions of the properties that ran checks but
// never ran them.
func (c *coverage) missing() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, row := range c.required {
		prop, _, _ := strings.Cut(row, ": ")
		if c.counts[secAction][prop+": check"] == 0 {
			continue // the property did not run (-run), or ran no check
		}
		if c.counts[secAction][row] == 0 {
			out = append(out, row)
		}
	}
	return out
}

// actions wraps a property's Repeat actions so each one drawn is counted
// (the "" action, rapid's check after every step, included as "check").
func (c *coverage) actions(m map[string]func(*rapid.T)) map[string]func(*rapid.T) {
	prop := currentProperty()
	out := make(map[string]func(*rapid.T), len(m))
	for name, f := range m {
		row := name
		if row == "" {
			row = "check"
		}
		// Every action is listed, drawn or not.
		c.add(secAction, prop+": "+row, 0)
		out[name] = func(t *rapid.T) {
			c.add(secAction, prop+": "+row, 1)
			defer c.timed(prop+": "+row, time.Now())
			f(t)
		}
	}
	return out
}

// timed adds the time since start to row's total in the time section; as a
// deferred call it counts an action that fails or skips too.
func (c *coverage) timed(row string, start time.Time) {
	c.add(secTime, row, int(time.Since(start).Milliseconds()))
}

// part runs a part of a check that is not a drawn action (a prologue, a
// final convergence) and adds its time to the row "<property>: row".
func (c *coverage) part(row string, f func()) {
	defer c.timed(currentProperty()+": "+row, time.Now())
	f()
}

// events tallies a finished check's event log: checkpoints reached, and
// where an armed crash, fault or pause fired; faults by kind.
func (c *coverage) events(evs []sim.Event) {
	for _, cp := range allCheckpoints {
		for _, what := range []string{"reached", "crashed at", "failed at"} {
			c.add(secCheckpoint, cp+": "+what, 0)
		}
	}
	type key struct{ host, cp string }
	armed := map[key]string{}
	for _, e := range evs {
		switch e.Kind {
		case "action":
			for _, how := range []string{"crash", "fault", "pause"} {
				if cp, ok := strings.CutPrefix(e.What, "armed "+how+" at checkpoint "); ok {
					cp, _, _ = strings.Cut(cp, ":")
					armed[key{e.Host, cp}] = how
				}
			}
		case "checkpoint":
			if strings.HasPrefix(e.What, "paused at ") || strings.HasPrefix(e.What, "released at ") {
				continue
			}
			c.add(secCheckpoint, e.What+": reached", 1)
			k := key{e.Host, e.What}
			switch armed[k] {
			case "crash":
				c.add(secCheckpoint, e.What+": crashed at", 1)
			case "fault":
				c.add(secCheckpoint, e.What+": failed at", 1)
			case "pause":
				c.add(secCheckpoint, e.What+": paused at", 1)
			}
			delete(armed, k)
		case "fault", "crash":
			c.add(secFault, faultKind(e), 1)
		}
	}
}

// faultKinds name the simulator's faults by the start of their event text
// (sim records them; docs/faults.md lists them).
var faultKinds = []struct{ prefix, kind string }{
	{"partition ", "partition"},
	{"cut ", "cut one link"},
	{"isolated", "isolate a host"},
	{"etcd crashed", "crash etcd (SIGKILL)"},
	{"kube-apiserver killed", "kill an apiserver (SIGKILL)"},
	{"clock offset", "skew a clock"},
	{"move leader", "leadership transfer"},
	{"disk: ", "disk fault"},
	{"services broken", "break services"},
	{"host crashed", "crash a host"},
	{"bootstrap token ", "delete a bootstrap token"},
}

// faultKind classifies a fault or crash event; a checkpoint's armed fault
// is counted under its checkpoint, and an unknown text under its own first
// words, so a new fault shows up rather than vanishing.
func faultKind(e sim.Event) string {
	if strings.HasPrefix(e.What, "checkpoint ") {
		return "fail at a checkpoint"
	}
	if strings.Contains(e.What, " refused: services broken") {
		return "break services: a start refused"
	}
	for _, f := range faultKinds {
		if strings.HasPrefix(e.What, f.prefix) {
			if f.kind == "disk fault" {
				op, _, _ := strings.Cut(strings.TrimPrefix(e.What, f.prefix), " ")
				return "disk fault: " + op
			}
			return f.kind
		}
	}
	words := strings.Fields(e.What)
	return strings.Join(words[:min(3, len(words))], " ")
}

// write prints the table: a section a block, a row a line, zeros included.
func (c *coverage) write(w io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "coverage of the fault space (zeros are corners this run did not reach):")
	for _, sec := range []string{secCheckpoint, secFault, secAction, secInvariant, secHistory, secTime} {
		rows := c.counts[sec]
		if len(rows) == 0 {
			continue
		}
		unit := "times"
		if sec == secTime {
			unit = "ms"
		}
		fmt.Fprintf(tw, "%s\t%s\n", sec, unit)
		for _, row := range slices.Sorted(maps.Keys(rows)) {
			fmt.Fprintf(tw, "  %s\t%d\n", row, rows[row])
		}
	}
	tw.Flush()
}
