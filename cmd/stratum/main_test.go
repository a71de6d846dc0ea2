package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// runCLI runs the CLI in-process and returns its exit code and streams.
func runCLI(t *testing.T, opts options, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runWith(args, &out, &errOut, opts)
	return code, out.String(), errOut.String()
}

// commands lists every command of the tree, root first.
func commands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		if sub.Name() == "help" {
			continue
		}
		out = append(out, commands(sub)...)
	}
	return out
}

func TestHelpShowsExamples(t *testing.T) {
	root := (&app{}).rootCmd()
	for _, cmd := range commands(root) {
		path := strings.Fields(cmd.CommandPath())[1:]
		t.Run(strings.Join(append([]string{"stratum"}, path...), " "), func(t *testing.T) {
			if strings.TrimSpace(cmd.Example) == "" {
				t.Fatalf("%s has no Example", cmd.CommandPath())
			}
			code, out, errOut := runCLI(t, options{}, append(path, "--help")...)
			if code != exitOK {
				t.Fatalf("%s --help: exit %d, want 0; stderr:\n%s", cmd.CommandPath(), code, errOut)
			}
			if !strings.Contains(out, cmd.Example) {
				t.Errorf("%s --help does not show its example %q:\n%s", cmd.CommandPath(), cmd.Example, out)
			}
		})
	}
	// sim up's help says the binaries' remedy and that joining is not yet the real flow.
	_, out, _ := runCLI(t, options{}, "sim", "up", "--help")
	for _, want := range []string{"make assets", "laid out directly", "once that flow lands"} {
		if !strings.Contains(out, want) {
			t.Errorf("sim up --help lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"--bogus"},
		{"sim", "bogus"},
		{"sim", "up", "--bogus"},
		{"sim", "up", "extra"},
		{"sim", "up", "--control-planes", "three"},
		{"version", "extra"},
		{"--log-level", "loud", "version"},
	} {
		code, out, errOut := runCLI(t, options{}, args...)
		if code != exitUsage {
			t.Errorf("stratum %s: exit %d, want %d; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, exitUsage, out, errOut)
			continue
		}
		if !strings.HasPrefix(errOut, "stratum: ") || !strings.Contains(errOut, "Usage:") {
			t.Errorf("stratum %s: stderr should say `stratum: <reason>` then the usage:\n%s", strings.Join(args, " "), errOut)
		}
	}
	// A group with no subcommand prints its help and succeeds.
	if code, out, _ := runCLI(t, options{}, "sim"); code != exitOK || !strings.Contains(out, "stratum sim up") {
		t.Errorf("stratum sim: exit %d, want 0 and the help:\n%s", code, out)
	}
}

func TestVersionPrintsPins(t *testing.T) {
	code, out, errOut := runCLI(t, options{}, "version")
	if code != exitOK {
		t.Fatalf("version: exit %d; stderr:\n%s", code, errOut)
	}
	for _, want := range []string{Version, version.Kubernetes, version.Etcd, version.EtcdPrevious} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}

func TestSimUpRefusesBadCounts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--control-planes", "0"}, "at least one control plane"},
		{[]string{"--control-planes", "-2"}, "at least one control plane"},
		{[]string{"--spare-hosts", "-1"}, "cannot be negative"},
		{[]string{"--control-planes", "150", "--spare-hosts", "60"}, "at most 200 hosts"},
	} {
		code, out, errOut := runCLI(t, options{}, append([]string{"sim", "up"}, tc.args...)...)
		if code != exitUsage || !strings.HasPrefix(errOut, "stratum: ") || !strings.Contains(errOut, tc.want) {
			t.Errorf("sim up %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
		if out != "" {
			t.Errorf("sim up %v: refused, yet printed:\n%s", tc.args, out)
		}
	}
}

func TestSimUpMissingBinariesNamesMakeAssets(t *testing.T) {
	t.Setenv(assets.EnvDir, t.TempDir())
	code, out, errOut := runCLI(t, options{}, "sim", "up", "--control-planes", "1")
	if code != exitFail || !strings.HasPrefix(errOut, "stratum: ") || !strings.Contains(errOut, "make assets") {
		t.Errorf("sim up without binaries: exit %d, stderr %q; want exit 1 naming `make assets`", code, errOut)
	}
	if out != "" {
		t.Errorf("sim up without binaries printed steps:\n%s", out)
	}
}

func TestSimUpEndToEnd(t *testing.T) {
	assetstest.Require(t, assets.KubeAPIServerName)
	var cluster *sim.Cluster
	opts := options{onCluster: func(c *sim.Cluster) { cluster = c }}
	events := filepath.Join(t.TempDir(), "events.json")
	start := time.Now()
	code, out, errOut := runCLI(t, opts, "sim", "up", "--control-planes", "3", "--events", events)
	t.Logf("sim up --control-planes 3 took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, errOut)
	}
	if cluster == nil {
		t.Fatal("the cluster hook was never called")
	}
	dir := cluster.RootDir()

	for _, want := range []string{
		"etcd cluster of 3 members ready",
		"3 kube-apiservers ready",
		"VIP " + cluster.VIPAddress().String() + " held by cp",
		"smoke check: ConfigMap kube-system/" + smokeConfigMap + " written through the VIP, read back from cp",
		"torn down",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The member table: one row per member, all voters, one leader, healthy.
	var rows, voters, leaders int
	inTable := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "MEMBER":
			inTable = true
		case inTable && len(f) == 0:
			inTable = false
		case inTable:
			if len(f) != 5 {
				t.Errorf("member row %q: want name, peer URL, role, leader, health", line)
				continue
			}
			rows++
			if f[2] == "voter" {
				voters++
			}
			if f[3] == "leader" {
				leaders++
			}
			if f[4] != "healthy" {
				t.Errorf("member row %q is not healthy", line)
			}
			if !strings.HasPrefix(f[1], "https://"+strings.TrimSuffix(cluster.VIPAddress().String(), ".10")+".") {
				t.Errorf("member row %q: peer URL not on the cluster's subnet", line)
			}
		}
	}
	if rows != 3 || voters != 3 || leaders != 1 {
		t.Errorf("member table: %d rows, %d voters, %d leaders; want 3, 3, 1", rows, voters, leaders)
	}

	// Nothing the run started survives it.
	if pids := sim.SimProcesses(dir); len(pids) > 0 {
		t.Errorf("simulator processes under %s outlived the run: %v", dir, pids)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory %s still exists after the run (stat: %v)", dir, err)
	}

	// The event log, as JSON, runs to the teardown.
	data, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	var evs []sim.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		t.Fatalf("event log %s is not a JSON event list: %v", events, err)
	}
	if len(evs) == 0 || evs[len(evs)-1].What != "cluster closed" {
		t.Errorf("event log does not end with the teardown: %d events", len(evs))
	}
}
