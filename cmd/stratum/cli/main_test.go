package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// runCLI runs the CLI in-process and returns its exit code and streams.
func runCLI(t testing.TB, opts Options, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, &out, &errOut, opts)
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
			code, out, errOut := runCLI(t, Options{}, append(path, "--help")...)
			if code != ExitOK {
				t.Fatalf("%s --help: exit %d, want 0; stderr:\n%s", cmd.CommandPath(), code, errOut)
			}
			if !strings.Contains(out, cmd.Example) {
				t.Errorf("%s --help does not show its example %q:\n%s", cmd.CommandPath(), cmd.Example, out)
			}
		})
	}
	// sim up's help says the binaries' remedy, that it needs the checkout
	// (a `make dist` install cannot run it) and that it runs the real flow;
	// operator pass's says every part of the pass.
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"sim", "up"}, []string{"make assets", `"stratum up"`, `"stratum token create --control-plane"`, `"stratum server"`,
			"needs the stratum repository checkout", "tools/versions.mk", `"make dist" install`}},
		{[]string{"sim"}, []string{"needs the stratum repository checkout", "tools/versions.mk", `"make dist" install`}},
		{[]string{"operator"}, []string{"publish the etcd members"}},
		{[]string{"operator", "pass"}, []string{"delete the join tokens stratum minted that have\nexpired", "delete the Secret once none is left", "publish the cluster's\ncurrent etcd members", "stratum.dev/etcd-client-urls"}},
	} {
		_, out, _ := runCLI(t, Options{}, append(tc.args, "--help")...)
		for _, want := range tc.wants {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help lacks %q:\n%s", strings.Join(tc.args, " "), want, out)
			}
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
		{"up", "extra"},
		{"up", "--node-ip", "not-an-ip"},
		{"up", "--vip", "10.0.0"},
		{"up", "--pod-cidr", "banana"},
		{"up", "--service-cidr", "10.96.0.0/33"},
		{"up", "--profile", "bogus"},
		{"server"},
		{"server", "--server", "https://10.0.0.10:6443", "--token", "abcdef.0123456789abcdef"},
		{"server", "--bogus"},
		{"token", "create", "--ttl", "two hours"},
		{"token", "create", "--ttl", "0s"},
		{"token", "create", "--ttl", "-1h"},
		{"token", "create", "--control-plane", "--ttl", "25h"},
		{"token", "create", "extra"},
		{"etcd", "bogus"},
		{"etcd", "members", "extra"},
		{"etcd", "health", "--bogus"},
		{"certs", "check", "extra"},
		{"grants", "prune", "extra"},
		{"completion", "bogus"},
		{"completion", "bash", "extra"},
		{"help", "bogus"},
	} {
		code, out, errOut := runCLI(t, Options{}, args...)
		if code != ExitUsage {
			t.Errorf("stratum %s: exit %d, want %d; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, ExitUsage, out, errOut)
			continue
		}
		if !strings.HasPrefix(errOut, "stratum: ") || !strings.Contains(errOut, "Usage:") {
			t.Errorf("stratum %s: stderr should say `stratum: <reason>` then the usage:\n%s", strings.Join(args, " "), errOut)
		}
	}
	// A group with no subcommand prints its help and succeeds.
	for _, g := range []struct{ group, sub string }{{"sim", "up"}, {"token", "create"}, {"etcd", "members"}, {"certs", "check"}, {"grants", "prune"}} {
		if code, out, _ := runCLI(t, Options{}, g.group); code != ExitOK || !strings.Contains(out, "stratum "+g.group+" "+g.sub) {
			t.Errorf("stratum %s: exit %d, want 0 and the help:\n%s", g.group, code, out)
		}
	}
}

// A flag value that does not parse is named with what the flag wants, not
// with the Go parser's error.
func TestBadFlagValuesSayWhatTheFlagWants(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		want, lack string
	}{
		{[]string{"token", "create", "--ttl", "banana"}, `invalid argument "banana" for "--ttl" flag: want a duration like 30s, 5m or 2h`, "time: invalid duration"},
		{[]string{"sim", "up", "--control-planes", "three"}, `invalid argument "three" for "--control-planes" flag: want a whole number`, "strconv"},
		{[]string{"sim", "up", "--keep=maybe"}, `invalid argument "maybe" for "--keep" flag: want true or false`, "strconv"},
	} {
		code, out, errOut := runCLI(t, Options{}, tc.args...)
		if code != ExitUsage || !strings.HasPrefix(errOut, "stratum: "+tc.want+"\n") || strings.Contains(errOut, tc.lack) || out != "" {
			t.Errorf("stratum %s: exit %d, stdout %q, stderr:\n%s\nwant exit %d, `stratum: %s` and no %q", strings.Join(tc.args, " "), code, out, errOut, ExitUsage, tc.want, tc.lack)
		}
	}
}

func TestVersionPrintsPins(t *testing.T) {
	code, out, errOut := runCLI(t, Options{}, "version")
	if code != ExitOK {
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
		code, out, errOut := runCLI(t, Options{}, append([]string{"sim", "up"}, tc.args...)...)
		if code != ExitUsage || !strings.HasPrefix(errOut, "stratum: ") || !strings.Contains(errOut, tc.want) {
			t.Errorf("sim up %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, ExitUsage, tc.want)
		}
		if out != "" {
			t.Errorf("sim up %v: refused, yet printed:\n%s", tc.args, out)
		}
	}
}

func TestSimUpMissingBinariesNamesMakeAssets(t *testing.T) {
	t.Setenv(assets.EnvDir, t.TempDir())
	code, out, errOut := runCLI(t, Options{}, "sim", "up", "--control-planes", "1")
	if code != ExitRefused || !strings.HasPrefix(errOut, "stratum: ") || !strings.Contains(errOut, "make assets") {
		t.Errorf("sim up without binaries: exit %d, stderr %q; want exit 3 naming `make assets`", code, errOut)
	}
	if out != "" {
		t.Errorf("sim up without binaries printed steps:\n%s", out)
	}
}

// sim up --events refuses, before anything starts, a FILE it cannot write
// or that exists and is not an event log of an earlier run (a mistyped
// path must not destroy a file), and changes nothing. A FILE it may write
// passes on to the next check: without binaries, the `make assets` refusal.
func TestSimUpEventsRefusesAFileItDidNotWrite(t *testing.T) {
	t.Setenv(assets.EnvDir, t.TempDir()) // no binaries: an accepted FILE ends at their refusal
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	readme := write("README.md", "# the project\n")
	object := write("object.json", `{"time": "2026-12-01T10:00:00Z", "kind": "action"}`)
	kindless := write("kindless.json", `[{"time": "2026-12-01T10:00:00Z", "what": "x"}]`)
	empty := write("empty.json", "")
	emptyLog := write("empty-log.json", "[]\n")
	earlier := writeEventLog(t, dir, "earlier.json", sampleEvents())
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	missingDir := filepath.Join(dir, "no-dir")
	snapshot := func() map[string]string {
		files := map[string]string{}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			files[e.Name()] = e.Type().String()
			if e.Type().IsRegular() { // not the FIFO: reading it would block
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				files[e.Name()] = string(b)
			}
		}
		return files
	}
	for _, tc := range []struct {
		file        string
		says, lacks []string
	}{
		{readme, []string{"--events " + readme + ": the file exists and is not a stratum event log from an earlier run", "pass a new path, or remove the file", "nothing was started"}, []string{"make assets"}},
		{object, []string{"is not a stratum event log from an earlier run"}, nil},
		{kindless, []string{"is not a stratum event log from an earlier run"}, nil},
		{fifo, []string{"--events " + fifo + ": it exists and is not a regular file"}, nil},
		{dir, []string{dir + " is a directory"}, nil},
		{filepath.Join(missingDir, "x.json"), []string{"--events " + filepath.Join(missingDir, "x.json") + ": the directory " + missingDir + " does not exist", "nothing was started"}, []string{".stratum-probe", "open "}},
		// Accepted: the binaries' refusal comes next.
		{filepath.Join(dir, "new.json"), []string{"make assets"}, []string{"--events"}},
		{empty, []string{"make assets"}, []string{"--events"}},
		{emptyLog, []string{"make assets"}, []string{"--events"}},
		{earlier, []string{"make assets"}, []string{"--events"}},
	} {
		before := snapshot()
		code, out, errOut := runCLI(t, Options{}, "sim", "up", "--control-planes", "1", "--events", tc.file)
		if code != ExitRefused || out != "" {
			t.Errorf("sim up --events %s: exit %d, stdout %q, stderr %q; want exit 3 and nothing printed", tc.file, code, out, errOut)
		}
		for _, s := range tc.says {
			if !strings.Contains(errOut, s) {
				t.Errorf("sim up --events %s: stderr %q does not say %q", tc.file, errOut, s)
			}
		}
		for _, s := range tc.lacks {
			if strings.Contains(errOut, s) {
				t.Errorf("sim up --events %s: stderr %q says %q", tc.file, errOut, s)
			}
		}
		if after := snapshot(); !maps.Equal(before, after) {
			t.Errorf("sim up --events %s changed %s: %v, then %v", tc.file, dir, before, after)
		}
	}
}

func TestSimUpEndToEnd(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	assetstest.Require(t, assets.KubeAPIServerName)
	var cluster *sim.Cluster
	events := filepath.Join(t.TempDir(), "events.json")
	// While the cluster runs, its event log file is kept current: a reader
	// sees the bring-up's events before the teardown's.
	liveSeen := make(chan bool, 1)
	stopWatch := make(chan struct{})
	opts := Options{OnCluster: func(c *sim.Cluster) {
		cluster = c
		go func() {
			for {
				evs, err := readEvents(events)
				if err == nil && slices.ContainsFunc(evs, func(e sim.Event) bool { return strings.Contains(e.What, "started") }) &&
					!slices.ContainsFunc(evs, func(e sim.Event) bool { return e.What == "cluster closed" }) {
					liveSeen <- true
					return
				}
				select {
				case <-stopWatch:
					liveSeen <- false
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}}
	start := time.Now()
	code, out, errOut := runCLI(t, opts, "sim", "up", "--control-planes", "3", "--events", events)
	close(stopWatch)
	if cluster != nil && !<-liveSeen {
		t.Errorf("the event log %s was never readable while the cluster ran", events)
	}
	t.Logf("sim up --control-planes 3 took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if code != ExitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, errOut)
	}
	if cluster == nil {
		t.Fatal("the cluster hook was never called")
	}
	dir := cluster.RootDir()

	// The bring-up ran stratum's own flow: up on cp1, then a grant and a
	// join for each further control plane, in order.
	steps := []string{
		"✓ cp1: stratum up (bootstrap)",
		"✓ token create --control-plane",
		"✓ cp2: stratum server (join)",
		"✓ token create --control-plane",
		"✓ cp3: stratum server (join)",
	}
	rest := out
	for _, step := range steps {
		i := strings.Index(rest, step)
		if i < 0 {
			t.Errorf("output lacks the step %q (in order)", step)
			break
		}
		rest = rest[i+len(step):]
	}
	for _, want := range []string{
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
			if len(f) != 6 {
				t.Errorf("member row %q: want name, peer URL, role, leader, etcd version, health", line)
				continue
			}
			rows++
			if f[2] == "voter" {
				voters++
			}
			if f[3] == "leader" {
				leaders++
			}
			if f[4] != version.Etcd {
				t.Errorf("member row %q does not name the etcd version %s", line, version.Etcd)
			}
			if f[5] != "healthy" {
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

// tempHost is this machine with its files under a temporary root instead of
// "/", and no service manager: a real-host command run on it touches nothing
// outside the root.
type tempHost struct {
	*host.Local
	starts []string
	// nodeAddrs, when set, are the host's only addresses (node-IP
	// detection's candidates and the addresses it has), in place of this
	// machine's.
	nodeAddrs *[]netip.Addr
}

func (h *tempHost) NodeAddresses() ([]netip.Addr, error) {
	if h.nodeAddrs != nil {
		return *h.nodeAddrs, nil
	}
	return h.Local.NodeAddresses()
}

func (h *tempHost) Addresses() ([]netip.Addr, error) {
	if h.nodeAddrs != nil {
		return append([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, *h.nodeAddrs...), nil
	}
	return h.Local.Addresses()
}

func (*tempHost) Name() string { return "test-node" }

func (h *tempHost) StartService(_ context.Context, name string) error {
	h.starts = append(h.starts, name)
	return fmt.Errorf("%w %q: no supervisor on this test host", host.ErrUnknownService, name)
}

func (*tempHost) StopService(_ context.Context, name string) error {
	return fmt.Errorf("%w %q: no supervisor on this test host", host.ErrUnknownService, name)
}

func (*tempHost) RestartService(_ context.Context, name string) error {
	return fmt.Errorf("%w %q: no supervisor on this test host", host.ErrUnknownService, name)
}

func (*tempHost) TrustCIDR(netip.Prefix) error   { return nil }
func (*tempHost) UntrustCIDR(netip.Prefix) error { return nil }

// onTempHost returns options whose real-host commands act on a fresh
// tempHost, and the host.
func onTempHost(t *testing.T) (Options, *tempHost) {
	t.Helper()
	h := &tempHost{Local: &host.Local{Dir: host.Dir{Root: t.TempDir(), LockDir: "/run/stratum"}}}
	return Options{Host: func() (host.Host, error) { return h, nil }}, h
}

// filesUnder lists every file under root with its contents.
func filesUnder(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[strings.TrimPrefix(p, root)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestServerRefusesMalformedFlagsChangingNothing(t *testing.T) {
	good := map[string]string{
		"--server":          "https://10.0.0.10:6443",
		"--token":           "abcdef.0123456789abcdef",
		"--ca-hash":         "sha256:" + strings.Repeat("ab", 32),
		"--certificate-key": strings.Repeat("cd", 32),
	}
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"--server", "http://10.0.0.10:6443", "--server"},
		{"--server", "https://10.0.0.10", "the port given"},
		{"--server", "https://10.0.0.10:6443/x?y", "nothing after it"},
		{"--server", "https://admin@10.0.0.10:6443", "is not https://<host>:<port>"},
		{"--token", "ABCDEF.0123456789abcdef", "--token is not"},
		{"--ca-hash", "md5:1234", "--ca-hash is not"},
		{"--certificate-key", "not-hex", "--certificate-key is not"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			opts, h := onTempHost(t)
			args := []string{"server"}
			for _, f := range []string{"--server", "--token", "--ca-hash", "--certificate-key"} {
				v := good[f]
				if f == tc.flag {
					v = tc.value
				}
				args = append(args, f, v)
			}
			code, out, errOut := runCLI(t, opts, args...)
			if code != ExitRefused {
				t.Fatalf("%v: exit %d, want %d; stderr:\n%s", args, code, ExitRefused, errOut)
			}
			for _, want := range []string{"stratum: ", "control-plane join refused", tc.want, "nothing was changed"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			if out != "" {
				t.Errorf("refused, yet printed:\n%s", out)
			}
			if files := filesUnder(t, h.Root); len(files) != 0 {
				t.Errorf("a refused join wrote files: %v", files)
			}
			if len(h.starts) > 0 {
				t.Errorf("a refused join started services: %v", h.starts)
			}
		})
	}
}

func TestControlPlaneCommandsRefuseOnANodeWithoutState(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "create", "--control-plane"}, "no control-plane state on this node"},
		{[]string{"token", "create"}, "no control-plane state on this node"},
		{[]string{"etcd", "members"}, "no control-plane state on this node"},
		{[]string{"etcd", "health"}, "no control-plane state on this node"},
		{[]string{"certs", "check"}, "no control-plane state on this node"},
		{[]string{"grants", "prune"}, "no control-plane state on this node"},
		{[]string{"grants", "list"}, "no control-plane state on this node"},
		{[]string{"token", "list"}, "no control-plane state on this node"},
		{[]string{"operator", "pass"}, "no control-plane state on this node"},
		{[]string{"certs", "rekey"}, "no control-plane state on this node"},
		{[]string{"certs", "reupload"}, "no control-plane state on this node"},
		{[]string{"repoint", "--vip", "10.0.0.10"}, "this machine is not a stratum node (no cluster CA at"},
	} {
		opts, h := onTempHost(t)
		code, out, errOut := runCLI(t, opts, tc.args...)
		if code != ExitRefused || !strings.HasPrefix(errOut, "stratum: ") || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v on a fresh node: exit %d, stderr %q; want exit 3 and %q", tc.args, code, errOut, tc.want)
		}
		if out != "" {
			t.Errorf("%v refused, yet printed:\n%s", tc.args, out)
		}
		if files := filesUnder(t, h.Root); len(files) != 0 {
			t.Errorf("%v wrote files: %v", tc.args, files)
		}
	}
}

func TestUpWithoutASupervisorSaysWhatRunsServices(t *testing.T) {
	opts, h := onTempHost(t)
	code, out, errOut := runCLI(t, opts, "up", "--node-ip", "127.0.0.1")
	if code != ExitFail {
		t.Fatalf("up without service units: exit %d, want 1; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"start etcd", "unknown service", "No stratum supervisor runs this node's services", "stratum up", "stratum sim up"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if len(h.starts) != 1 || h.starts[0] != "etcd" {
		t.Errorf("services started: %v, want only etcd tried", h.starts)
	}
	t.Logf("stratum up on a host without units:\n%s", errOut)
	// The hint says a later `stratum up` starts from the files written: it
	// does, trying etcd again rather than refusing.
	code, _, errOut = runCLI(t, opts, "up")
	if code != ExitFail || !strings.Contains(errOut, "No stratum supervisor") || len(h.starts) != 2 || h.starts[1] != "etcd" {
		t.Errorf("second up: exit %d, starts %v, stderr:\n%s", code, h.starts, errOut)
	}
}
