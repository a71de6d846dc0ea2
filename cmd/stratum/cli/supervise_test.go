package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/version"
)

func TestJoinSecretSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("abcdef.0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envToken, "fromenv.0123456789abcdef")
	for _, tc := range []struct {
		name, value, file, want, wantErr string
	}{
		{name: "flag wins over the environment", value: "flag", want: "flag"},
		{name: "file, trimmed", file: file, want: "abcdef.0123456789abcdef"},
		{name: "environment", want: "fromenv.0123456789abcdef"},
		{name: "flag and file", value: "flag", file: file, wantErr: "both given"},
		{name: "missing file", file: filepath.Join(dir, "nope"), wantErr: "no such file"},
		{name: "empty file", file: empty, wantErr: "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := secret("--token", tc.value, "--token-file", tc.file, envToken)
			if tc.wantErr != "" {
				var ue usageError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ue) {
					t.Fatalf("secret = %q, %v; want a usage error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("secret = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestServerRefusesAFlagAndItsFileTogether(t *testing.T) {
	opts, h := onTempHost(t)
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte(strings.Repeat("cd", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, opts, "server", "--server", "https://10.0.0.10:6443", "--token", "abcdef.0123456789abcdef",
		"--ca-hash", "sha256:"+strings.Repeat("ab", 32), "--certificate-key", strings.Repeat("cd", 32), "--certificate-key-file", file)
	if code != ExitUsage || !strings.Contains(errOut, "--certificate-key and --certificate-key-file both given") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if files := filesUnder(t, h.Root); len(files) != 0 {
		t.Fatalf("a refused join wrote %v", files)
	}
}

func TestInstallWritesAUnitThatRunsUpOnlyWithState(t *testing.T) {
	dir := t.TempDir()
	bin := pinnedBinDir(t)
	// A relative --bin-dir is made absolute (systemd runs the unit from /);
	// one without the binaries, or one a unit would split, is refused.
	rel, err := filepath.Rel(mustGetwd(t), bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		binDir string
		code   int
		says   string
	}{
		{filepath.Join(dir, "nothing-here"), ExitRefused, "etcd is missing"},
		{filepath.Join(dir, "bin dir"), ExitUsage, "which a systemd ExecStart would split"},
	} {
		if code, _, errOut := runCLI(t, Options{}, "install", "--unit-dir", dir, "--bin-dir", tc.binDir); code != tc.code || !strings.Contains(errOut, tc.says) || !strings.Contains(errOut, "nothing was written") {
			t.Fatalf("install --bin-dir %q: exit %d, want %d saying %q:\n%s", tc.binDir, code, tc.code, tc.says, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "stratum.service")); err == nil {
			t.Fatalf("a refused install --bin-dir %q wrote the unit", tc.binDir)
		}
	}
	code, out, errOut := runCLI(t, Options{}, "install", "--unit-dir", dir, "--bin-dir", rel)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	unit, err := os.ReadFile(filepath.Join(dir, "stratum.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" up --as-supervisor --bin-dir " + bin + "\n", "ConditionPathExists=/var/lib/stratum/node-state.json", "Type=notify\n", "NotifyAccess=main\n", "Restart=always", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	if !strings.Contains(out, "wrote "+filepath.Join(dir, "stratum.service")) {
		t.Errorf("stdout does not say what was written:\n%s", out)
	}
	// A directory systemd reads no units from: written, and said how
	// systemd finds it, not the enable that would not.
	if want := "note: systemd reads no units from " + dir + ": `systemctl link " + filepath.Join(dir, "stratum.service") + "`"; !strings.Contains(out, want) || strings.Contains(out, "enable it with") {
		t.Errorf("install into %s does not say systemd reads no units there (%q):\n%s", dir, want, out)
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI(t, Options{}, "install", "--dry-run", "--unit-dir", other, "--bin-dir", bin)
	if code != ExitOK || !strings.Contains(out, "ExecStart=") {
		t.Fatalf("dry run: exit %d, stdout:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(other, "stratum.service")); err == nil {
		t.Fatal("a dry run wrote the unit")
	}
	// A unit directory that is missing (a typo systemd would never read
	// from) or not a directory is refused, a dry run's too, and made
	// nothing.
	for _, unitDir := range []string{filepath.Join(dir, "sytem"), filepath.Join(dir, "stratum.service")} {
		for _, dry := range []bool{false, true} {
			args := []string{"install", "--unit-dir", unitDir, "--bin-dir", bin}
			if dry {
				args = append(args, "--dry-run")
			}
			code, out, errOut := runCLI(t, Options{}, args...)
			if code != ExitRefused || !strings.Contains(errOut, "--unit-dir "+unitDir) || !strings.Contains(errOut, "nothing was written") || out != "" {
				t.Fatalf("%v: exit %d, want %d naming the directory; stdout %q, stderr:\n%s", args, code, ExitRefused, out, errOut)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sytem")); err == nil {
		t.Fatal("a refused install made the missing unit directory")
	}
	// --now where no systemd runs (this test's machine) has no unit to
	// start: refused, a dry run's too, with nothing written.
	if systemdRuns() || os.Geteuid() != 0 {
		t.Log("systemd runs on this machine, or this test does not run as root: --now's refusal without systemd is not checked here (e2e runs --now under systemd)")
		return
	}
	for _, dry := range []bool{false, true} {
		args := []string{"install", "--now", "--unit-dir", other, "--bin-dir", bin}
		if dry {
			args = append(args, "--dry-run")
		}
		code, out, errOut := runCLI(t, Options{}, args...)
		if code != ExitRefused || !strings.Contains(errOut, "systemd is not running") || !strings.Contains(errOut, "nothing was written") || out != "" {
			t.Fatalf("%v: exit %d, want %d saying systemd is not running; stdout %q, stderr:\n%s", args, code, ExitRefused, out, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(other, "stratum.service")); err == nil {
		t.Fatal("a refused install --now wrote the unit")
	}
}

// TestInstallFlagIsForAHandStartedSupervisor: up --install with
// --as-supervisor (how the unit runs up) is bad usage, refused before
// anything else.
func TestInstallFlagIsForAHandStartedSupervisor(t *testing.T) {
	code, out, errOut := runCLI(t, Options{}, "up", "--install", "--as-supervisor")
	if code != ExitUsage || !strings.Contains(errOut, "--install hands a supervisor started by hand") || out != "" {
		t.Fatalf("up --install --as-supervisor: exit %d, want %d naming --install; stdout %q, stderr:\n%s", code, ExitUsage, out, errOut)
	}
}

// TestHandoffReadsTheProcesses: install --now tells a supervisor's unit by
// its control group, on cgroup v2 and v1, a process by its start time, a
// drop-in that sets ExecStart, and which unit directory systemd reads first.
func TestHandoffReadsTheProcesses(t *testing.T) {
	for cgroups, want := range map[string]string{
		"0::/system.slice/stratum.service\n":                                                         "stratum.service",
		"0::/user.slice/user-0.slice/session-3.scope\n":                                              "",
		"12:memory:/system.slice/cron.service\n1:name=systemd:/system.slice/stratum.service\n0::/\n": "stratum.service",
		"1:name=systemd:/user.slice/user-0.slice/session-3.scope\n0::/\n":                            "",
		"0::/\n":                                 "",
		"0::/system.slice/cloud-final.service\n": "cloud-final.service",
		"":                                       "",
	} {
		if got := serviceOfCgroups(cgroups); got != want {
			t.Errorf("serviceOfCgroups(%q) = %q, want %q", cgroups, got, want)
		}
	}
	for unit, want := range map[string]bool{
		"[Service]\nExecStart=\nExecStart=/opt/other up\n":             true,
		"[Service]\n  ExecStart = /opt/other up\n":                     true,
		"[Service]\nExecStartPre=/bin/true\nExecStartPost=/bin/true\n": false,
		"# ExecStart is left as it is\n[Service]\nLimitNOFILE=65536\n": false,
	} {
		if got := setsExecStart([]byte(unit)); got != want {
			t.Errorf("setsExecStart(%q) = %v, want %v", unit, got, want)
		}
	}
	// systemd reads /etc before /run before /usr/lib; a directory it reads
	// that is not in the list (its control or transient ones) wins.
	for _, tc := range []struct {
		dir, ours string
		want      bool
	}{
		{"/etc/systemd/system", "/usr/lib/systemd/system", true},
		{"/usr/lib/systemd/system", "/etc/systemd/system", false},
		{"/run/systemd/transient", "/etc/systemd/system", true},
		{"/etc/systemd/system", "/etc/systemd/system", false},
	} {
		if got := outranks(tc.dir, tc.ours); got != tc.want {
			t.Errorf("outranks(%s, %s) = %v, want %v", tc.dir, tc.ours, got, tc.want)
		}
	}
	if processStart(os.Getpid()) == "" {
		t.Fatal("processStart of this process is empty")
	}
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	if got := processStart(child.Process.Pid); got != "" {
		t.Fatalf("processStart of an ended process = %q, want empty", got)
	}
}

// TestUpRefusesBadOptionsBeforeWriting: an unknown profile, a cluster
// domain that is not DNS-1123 and overlapping ranges are refused before a
// single file is written (the CAs included).
// TestUpRefusesBadOptionsBeforeWriting: every bad input of a bring-up is
// refused (exit 3) or bad usage (exit 2), names what is wrong, and writes
// nothing: one case per input.
func TestUpRefusesBadOptionsBeforeWriting(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown profile", []string{"--profile", "bogus"}, ExitUsage, `unknown profile "bogus"`},
		{"bad cluster domain", []string{"--cluster-domain", "Bad_Domain!"}, ExitUsage, `cluster domain "Bad_Domain!" is not a DNS domain (like cluster.local): want lower-case letters`},
		{"overlapping ranges", []string{"--pod-cidr", "10.96.0.0/16"}, ExitRefused, "overlaps"},
		{"pod CIDR not a CIDR", []string{"--pod-cidr", "10.244.0.0"}, ExitUsage, `pod CIDR "10.244.0.0" is not a CIDR (like 10.244.0.0/16)`},
		{"pod CIDR garbage", []string{"--pod-cidr", "garbage"}, ExitUsage, `pod CIDR "garbage" is not a CIDR (like 10.244.0.0/16)`},
		{"service CIDR not a CIDR", []string{"--service-cidr", "ten.96/12"}, ExitUsage, `service CIDR "ten.96/12" is not a CIDR (like 10.96.0.0/12)`},
		{"service CIDR too small for the cluster DNS", []string{"--service-cidr", "10.96.0.0/29"}, ExitUsage, "service CIDR 10.96.0.0/29 is too small"},
		{"VIP is the node's address", []string{"--vip", "127.0.0.1"}, ExitRefused, "the VIP 127.0.0.1 is this node's own address"},
		{"pod CIDR over the node IP", []string{"--pod-cidr", "127.0.0.0/8"}, ExitRefused, "node IP 127.0.0.1 lies inside the pod CIDR 127.0.0.0/8"},
		{"service CIDR over the VIP", []string{"--vip", "10.96.0.10"}, ExitRefused, "VIP 10.96.0.10 lies inside the service CIDR 10.96.0.0/12"},
		{"pod CIDR over a dual-stack node's second IP", []string{"--node-ip", "127.0.0.1,::1", "--pod-cidr", "10.244.0.0/16,::/64", "--service-cidr", "10.96.0.0/12,fd00:10::/108"}, ExitRefused, "node IP ::1 lies inside the pod CIDR ::/64"},
		{"VIP not an IP", []string{"--vip", "vip.example"}, ExitUsage, `--vip: the VIP "vip.example" is not an IP address`},
		{"VIP not IPv4", []string{"--vip", "fd00::10"}, ExitUsage, "ARP, which is IPv4 only"},
		{"node IP not this host's", []string{"--node-ip", "198.18.250.250"}, ExitRefused, "node IP 198.18.250.250 (from flag)"},
		{"node IP not an IP", []string{"--node-ip", "cp1"}, ExitUsage, `--node-ip "cp1" is not an IP address`},
		{"dual-stack node IP of one family", []string{"--node-ip", "127.0.0.1,127.0.0.2"}, ExitUsage, "one family"},
		{"dual-stack node IP not this host's", []string{"--node-ip", "198.18.250.250,2001:db8::250"}, ExitRefused, "node IP 198.18.250.250 (from flag)"},
		{"etcd quota over 8 GiB", []string{"--etcd-quota", "9Gi"}, ExitUsage, "--etcd-quota: etcd quota 9.0 GiB: want 16.0 MiB to 8.0 GiB"},
		{"etcd quota not a size", []string{"--etcd-quota", "lots"}, ExitUsage, `--etcd-quota: etcd quota "lots": not a size`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, h := onTempHost(t)
			code, _, errOut := runCLI(t, opts, append([]string{"up", "--node-ip", "127.0.0.1"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || code == ExitRefused && !strings.Contains(errOut, "nothing was changed") {
				t.Fatalf("exit %d, want %d naming %q; stderr:\n%s", code, tc.code, tc.want, errOut)
			}
			if files := filesUnder(t, h.Root); len(files) != 0 {
				keys := make([]string, 0, len(files))
				for k := range files {
					keys = append(keys, k)
				}
				t.Fatalf("a refused up wrote %v", keys)
			}
		})
	}
}

// TestUpAndServerResolveTheNodeIPBeforeWriting: a node IP stratum must
// detect is resolved among the refusals, so a host with no address to
// detect, or whose detected address is the VIP, is refused (exit 3) before
// the bring-up makes its CAs or the join downloads the shared certificates:
// nothing is written.
func TestUpAndServerResolveTheNodeIPBeforeWriting(t *testing.T) {
	join := []string{"server", "--server", "https://10.0.0.10:6443", "--token", "abcdef.0123456789abcdef",
		"--ca-hash", "sha256:" + strings.Repeat("ab", 32), "--certificate-key", strings.Repeat("cd", 32)}
	for _, tc := range []struct {
		name  string
		addrs []netip.Addr
		args  []string
		want  []string
	}{
		{"up on a host with no address to detect", nil, []string{"up"},
			[]string{"stratum up refused", "detect the node IP", "no non-loopback address", "pass --node-ip", "nothing was changed"}},
		{"up whose detected address is the VIP", []netip.Addr{netip.MustParseAddr("198.18.7.5")}, []string{"up", "--vip", "198.18.7.5"},
			[]string{"stratum up refused", "the VIP 198.18.7.5 is this node's own address (from detected)", "nothing was changed"}},
		{"server on a host with no address to detect", nil, join,
			[]string{"control-plane join refused", "detect the node IP", "no non-loopback address", "pass --node-ip", "nothing was changed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, h := onTempHost(t)
			addrs := tc.addrs
			h.nodeAddrs = &addrs
			code, out, errOut := runCLI(t, opts, tc.args...)
			if code != ExitRefused {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitRefused, out, errOut)
			}
			for _, want := range tc.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			if files := filesUnder(t, h.Root); len(files) != 0 {
				keys := make([]string, 0, len(files))
				for k := range files {
					keys = append(keys, k)
				}
				t.Fatalf("refused, yet wrote %v", keys)
			}
		})
	}
}

// pinnedBinDir is a directory holding the pinned etcd and kube-apiserver (links
// to the built assets), as the bin/ of `make dist` does.
func pinnedBinDir(t *testing.T) string {
	t.Helper()
	assetstest.Require(t, assets.EtcdName(version.Etcd), assets.KubeAPIServerName)
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	etcd, err := assets.Etcd(version.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	apiserver, err := assets.KubeAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{controlplane.EtcdBinary: etcd, controlplane.APIServerBinary: apiserver} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestStatusJudgesOnlyTheServicesThisNodeRuns: a control plane without a VIP
// never starts kube-vip, and a supervisor started with --operator=false does
// not know the operator; status leaves both out and exits 0 while etcd and
// the apiserver run. With a VIP recorded, kube-vip not running is a problem.
func TestStatusJudgesOnlyTheServicesThisNodeRuns(t *testing.T) {
	ctx := context.Background()
	runs := func(ctx context.Context) error { <-ctx.Done(); return nil }
	sup, err := supervisor.New(supervisor.Config{LogDir: t.TempDir(), Services: []supervisor.Spec{
		{Name: ha.ServiceEtcd, Run: runs}, {Name: ha.ServiceAPIServer, Run: runs}, {Name: ha.ServiceVIP, Run: runs},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Shutdown()
	for _, s := range []string{ha.ServiceEtcd, ha.ServiceAPIServer} {
		if err := sup.StartService(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	h := &host.Local{Dir: host.Dir{Root: t.TempDir()}, Services: sup}

	rep := statusReport{Node: &nodeReport{NodeName: "cp1"}}
	if err := rep.judge(rep.askSupervisor(ctx, h)); err != nil || rep.Problem != "" {
		t.Fatalf("status of a control plane without a VIP running etcd and the apiserver: %v (problem %q)", err, rep.Problem)
	}
	var names []string
	for _, s := range rep.Services {
		names = append(names, s.Name)
	}
	if want := []string{ha.ServiceEtcd, ha.ServiceAPIServer}; !slices.Equal(names, want) {
		t.Fatalf("services reported %v, want %v", names, want)
	}

	rep = statusReport{Node: &nodeReport{NodeName: "cp1", VIP: "10.0.0.10"}}
	if err := rep.judge(rep.askSupervisor(ctx, h)); err == nil || !strings.Contains(rep.Problem, "not running: kube-vip") {
		t.Fatalf("status with a VIP and kube-vip stopped: %v (problem %q), want kube-vip named", err, rep.Problem)
	}
	if rep.StratumSkew != "" {
		t.Fatalf("status from the stratum the supervisor runs warns of a skew: %q", rep.StratumSkew)
	}

	// A supervisor running another stratum than the binary asked (one
	// installed in its place, not yet restarted into): a warning naming
	// both, not a problem.
	old, err := supervisor.New(supervisor.Config{LogDir: t.TempDir(), Services: []supervisor.Spec{
		{Name: ha.ServiceEtcd, Run: runs}, {Name: ha.ServiceAPIServer, Run: runs},
		{Name: ha.ServiceVIP, Run: runs, Version: "stratum v0.0.1-before"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Shutdown()
	for _, s := range []string{ha.ServiceEtcd, ha.ServiceAPIServer, ha.ServiceVIP} {
		if err := old.StartService(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	rep = statusReport{Node: &nodeReport{NodeName: "cp1", VIP: "10.0.0.10"}}
	if err := rep.judge(rep.askSupervisor(ctx, &host.Local{Dir: host.Dir{Root: t.TempDir()}, Services: old})); err != nil || !strings.Contains(rep.StratumSkew, "runs stratum v0.0.1-before, and this binary is stratum "+Version) {
		t.Fatalf("status from another stratum than the supervisor runs: %v, skew %q; want exit 0 with a warning naming both", err, rep.StratumSkew)
	}
}

// TestStatusOfASupervisorThatDoesNotAnswer: a supervisor that takes the
// connection and never answers (stopped by SIGSTOP, hung in I/O) held
// status, the command run to find that out, for ever; each question is
// bounded and the problem says the supervisor did not answer. Not parallel:
// it shortens the bound for its run.
func TestStatusOfASupervisorThatDoesNotAnswer(t *testing.T) {
	defer func(was time.Duration) { statusAskWithin = was }(statusAskWithin)
	statusAskWithin = 300 * time.Millisecond
	path := filepath.Join(t.TempDir(), "supervisor.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	rep := statusReport{Node: &nodeReport{NodeName: "cp1"}}
	done := make(chan error, 1)
	go func() {
		done <- rep.judge(rep.askSupervisor(context.Background(), &host.Local{Dir: host.Dir{Root: t.TempDir()}, Services: supervisor.Client{Path: path}}))
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(rep.Problem, "the supervisor did not answer within 300ms") {
			t.Fatalf("status of a silent supervisor: %v, problem %q; want one saying it did not answer", err, rep.Problem)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("status of a supervisor that does not answer did not return")
	}
}

// TestServerTakesItsSecretsOutOfTheEnvironment: the join secrets read from
// the environment are removed from it, so etcd and the apiserver, which
// inherit the supervisor's environment, never hold them.
func TestServerTakesItsSecretsOutOfTheEnvironment(t *testing.T) {
	opts, _ := onTempHost(t)
	t.Setenv(envToken, "abcdef.0123456789abcdef")
	t.Setenv(envCertKey, strings.Repeat("cd", 32))
	if code, _, errOut := runCLI(t, opts, "server", "--ca-hash", "sha256:"+strings.Repeat("ab", 32)); code != ExitUsage || !strings.Contains(errOut, "--server") {
		t.Fatalf("server without --server: exit %d\n%s", code, errOut)
	}
	for _, env := range []string{envToken, envCertKey} {
		if v, ok := os.LookupEnv(env); ok {
			t.Errorf("$%s is still in the environment (%q) after the join read it", env, v)
		}
	}
}

// TestServerMovesFlagSecretsIntoItsEnvironment: `stratum server` given its
// secrets as flags runs itself again (Options.Exec), before it reads any file
// or variable, with the same command line less those flags and their values,
// each secret in the environment the re-run reads (and then unsets) in place
// of a variable of the same name; a secret from a file or the environment is
// left for the re-run to read. A flag beside its file is refused first; the
// file form, or no Exec, runs nothing; an exec that fails goes on with a
// warning. The real exec is e2e's (checkSecretsNotInProcessList).
func TestServerMovesFlagSecretsIntoItsEnvironment(t *testing.T) {
	tok, key := "abcdef.0123456789abcdef", strings.Repeat("cd", 32)
	args := []string{"server", "--server", "https://10.0.0.10:6443", "--token", tok, "--ca-hash", "sha256:" + strings.Repeat("ab", 32),
		"--certificate-key=" + key, "--node-ip", "10.0.0.12", "--token-file-not-a-secret", "x"}
	var gotArgv, gotEnv []string
	execs := 0
	a := &app{args: args, log: slog.New(slog.DiscardHandler), opts: Options{Exec: func(_ string, argv, env []string) error {
		gotArgv, gotEnv = argv, env
		execs++
		return nil
	}}}
	envOf := func(name string) []string {
		var vs []string
		for _, kv := range gotEnv {
			if k, v, _ := strings.Cut(kv, "="); k == name {
				vs = append(vs, v)
			}
		}
		return vs
	}
	t.Setenv(envToken, "an.older-one-the-flag-overrides")
	if err := a.secretsOutOfArgv(&serverFlags{token: tok, certKey: key}); err != nil {
		t.Fatal(err)
	}
	want := append([]string{os.Args[0]}, "server", "--server", "https://10.0.0.10:6443", "--ca-hash", "sha256:"+strings.Repeat("ab", 32),
		"--node-ip", "10.0.0.12", "--token-file-not-a-secret", "x")
	if !slices.Equal(gotArgv, want) {
		t.Fatalf("re-run as %q, want %q", gotArgv, want)
	}
	if got := envOf(envToken); !slices.Equal(got, []string{tok}) {
		t.Fatalf("the re-run's $%s: %q, want the flag's alone", envToken, got)
	}
	if got := envOf(envCertKey); !slices.Equal(got, []string{key}) {
		t.Fatalf("the re-run's $%s: %q, want the flag's", envCertKey, got)
	}

	// The token as a flag, the key from the environment: the key is left
	// there for the re-run (it once lost it, exit 2).
	t.Setenv(envCertKey, key)
	if err := a.secretsOutOfArgv(&serverFlags{token: tok}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(envOf(envToken), []string{tok}) || !slices.Equal(envOf(envCertKey), []string{key}) {
		t.Fatalf("the re-run's environment: token %q, key %q", envOf(envToken), envOf(envCertKey))
	}

	// A flag beside its file is refused as the join would, before any exec;
	// the file form runs nothing.
	execs = 0
	var ue usageError
	if err := a.secretsOutOfArgv(&serverFlags{token: tok, tokenFile: "t"}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--token and --token-file both given") {
		t.Fatalf("--token beside --token-file: %v, want the usage error", err)
	}
	if err := a.secretsOutOfArgv(&serverFlags{tokenFile: "t", certKeyFile: "k"}); err != nil || execs != 0 {
		t.Fatalf("the file form ran again (%d execs, %v)", execs, err)
	}
	// An exec that fails (no /proc) goes on, the secrets where they were.
	a.opts.Exec = func(string, []string, []string) error { return errors.New("no such file or directory") }
	if err := a.secretsOutOfArgv(&serverFlags{token: tok}); err != nil {
		t.Fatalf("a failed exec: %v, want the join to go on", err)
	}

	for _, tc := range []struct{ in, want []string }{
		{[]string{"--token", "t", "--x"}, []string{"--x"}},
		{[]string{"--token=t", "--certificate-key", "k"}, nil},
		{[]string{"--token"}, nil},
		{[]string{"--y", "--", "--token", "t"}, []string{"--y", "--", "--token", "t"}},
		{[]string{"--token-file", "f", "--certificate-key-file=g"}, []string{"--token-file", "f", "--certificate-key-file=g"}},
	} {
		if got := withoutSecretFlags(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("withoutSecretFlags(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestASecondSignalForcesTheShutdown: the first signal is the orderly
// shutdown's (the command's context ends on it), so the watcher does
// nothing; the second forces the supervisor's stops, once, saying so.
func TestASecondSignalForcesTheShutdown(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	var out bytes.Buffer // read after end, which waits for the watcher
	forced := make(chan struct{}, 2)
	end := forceOnSecondSignal(sigs, func() { forced <- struct{}{} }, &out)
	sigs <- syscall.SIGTERM
	select {
	case <-forced:
		t.Fatal("the first signal forced the shutdown")
	case <-time.After(200 * time.Millisecond):
	}
	sigs <- syscall.SIGINT
	select {
	case <-forced:
	case <-time.After(10 * time.Second):
		t.Fatal("the second signal did not force the shutdown")
	}
	end()
	if got := out.String(); !strings.Contains(got, "second signal (interrupt): killing what still runs at once") {
		t.Errorf("the forced shutdown printed %q", got)
	}

	// A closing terminal's two SIGHUPs (its shell's, then the kernel's to
	// the foreground process group): the orderly shutdown goes on; a
	// SIGTERM after them still forces.
	sigs = make(chan os.Signal, 3)
	end = forceOnSecondSignal(sigs, func() { forced <- struct{}{} }, io.Discard)
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGHUP
	select {
	case <-forced:
		t.Fatal("a closing terminal's second SIGHUP forced the shutdown")
	case <-time.After(200 * time.Millisecond):
	}
	sigs <- syscall.SIGTERM
	select {
	case <-forced:
	case <-time.After(10 * time.Second):
		t.Fatal("a SIGTERM after two SIGHUPs did not force the shutdown")
	}
	end()

	// Ended before a second signal: it never forces.
	sigs = make(chan os.Signal, 2)
	end = forceOnSecondSignal(sigs, func() { forced <- struct{}{} }, io.Discard)
	sigs <- syscall.SIGINT
	end()
	sigs <- syscall.SIGINT
	select {
	case <-forced:
		t.Fatal("a watcher that was ended forced the shutdown")
	case <-time.After(200 * time.Millisecond):
	}
}

// hostNamed is a host whose hostname is name, nothing else of it used.
type hostNamed struct {
	host.Host
	name string
}

func (h hostNamed) Name() string { return h.name }

// TestNodeIdentityIsTheRecordedNodeName: the VIP and operator Leases are held
// as the node name the state records, whatever the hostname is now (renamed
// since the join, or "localhost" before DHCP named the machine); a state
// without one falls back to the hostname.
func TestNodeIdentityIsTheRecordedNodeName(t *testing.T) {
	if got := nodeIdentity(&nodestate.NodeState{NodeName: "cp2"}, hostNamed{name: "localhost"}); got != "cp2" {
		t.Errorf("identity of node cp2 on a host now named localhost = %q, want cp2", got)
	}
	if got := nodeIdentity(&nodestate.NodeState{}, hostNamed{name: "cp3"}); got != "cp3" {
		t.Errorf("identity without a recorded node name = %q, want the hostname cp3", got)
	}
}

// TestEtcdRelaunchWaitsForItsData: a member that has served crashes, and its
// data directory is empty when the supervisor relaunches it (its disk went
// away). The relaunch is refused, and the status says why, instead of etcd
// starting a new, empty member there; once the data is back etcd runs again.
// The same for a binary swapped on disk under the running supervisor (a
// release installed in place before the restart): the relaunch after a
// crash checks it as the supervisor's start does, and never runs one that
// is not the pinned version.
func TestEtcdRelaunchWaitsForItsData(t *testing.T) {
	h := &host.Dir{Root: t.TempDir(), LockDir: "/run/stratum"}
	st := &nodestate.NodeState{
		NodeName: "cp1", NodeIP: "127.0.0.1", ServiceCIDR: "10.96.0.0/12",
		Etcd: nodestate.Etcd{
			Name: "cp1", PeerURL: "https://127.0.0.1:2380", ClientURL: "https://127.0.0.1:2379",
			InitialCluster: "cp1=https://127.0.0.1:2380", InitialClusterState: "new", Started: true,
		},
	}
	if err := nodestate.Save(h, st); err != nil {
		t.Fatal(err)
	}
	member := filepath.Join(version.EtcdDataDir, "member")
	if err := h.MkdirAll(member, 0o700); err != nil {
		t.Fatal(err)
	}
	// The stand-in etcd says the pinned version, or records its pid and
	// sleeps.
	binDir := t.TempDir()
	if err := os.Chmod(binDir, 0o755); err != nil { // whatever the umask made it
		t.Fatal(err)
	}
	pidFile := filepath.Join(binDir, "pid")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'etcd Version: " + strings.TrimPrefix(version.Etcd, "v") + "'; exit 0; fi\necho $$ > " + pidFile + "\nexec sleep 600\n"
	if err := os.WriteFile(filepath.Join(binDir, controlplane.EtcdBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	etcdBinary := &binaryVersion{bins: controlplane.Binaries{Dir: binDir}, name: controlplane.EtcdBinary, last: version.Etcd, state: h}
	sup, err := supervisor.New(supervisor.Config{
		LogDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Services: []supervisor.Spec{{Name: ha.ServiceEtcd, Command: etcdCommand(h, etcdBinary), StopTimeout: time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sup.StartService(ctx, ha.ServiceEtcd); err != nil {
		t.Fatal(err)
	}
	status := func() host.ServiceStatus {
		s, err := sup.ServiceStatus(ctx, ha.ServiceEtcd)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitFor := func(what string, ok func(host.ServiceStatus) bool) {
		t.Helper()
		for s := status(); !ok(s); s = status() {
			if ctx.Err() != nil {
				t.Fatalf("%s: etcd's status is still %q", what, s.Detail)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	readPid := func() int {
		t.Helper()
		var pid int
		waitFor("the stand-in's pid", func(host.ServiceStatus) bool {
			b, err := os.ReadFile(pidFile)
			return err == nil && len(bytes.TrimSpace(b)) > 0 && func() bool { _, err := fmt.Sscan(string(b), &pid); return err == nil }()
		})
		return pid
	}
	pid := readPid()
	if err := h.RemoveAll(version.EtcdDataDir); err != nil {
		t.Fatal(err)
	}
	os.Remove(pidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor("relaunch on an empty data directory", func(s host.ServiceStatus) bool {
		return strings.Contains(s.Detail, "restarting after") && strings.Contains(s.Detail, ha.ErrEtcdDataMissing.Error())
	})
	if _, err := os.Stat(pidFile); err == nil {
		t.Fatal("etcd was launched on an empty data directory")
	}
	if err := h.MkdirAll(member, 0o700); err != nil {
		t.Fatal(err)
	}
	waitFor("relaunch once the data is back", func(s host.ServiceStatus) bool { return s.Running })
	pid = readPid()

	etcdPath := filepath.Join(binDir, controlplane.EtcdBinary)
	install := func(script string) {
		t.Helper()
		os.Remove(etcdPath) // a new file, as an install writes, not the running one's text
		if err := os.WriteFile(etcdPath, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The same stand-in, saying a version this stratum does not run.
	otherVersion := strings.Replace(script, strings.TrimPrefix(version.Etcd, "v"), strings.TrimPrefix(version.Etcd, "v")+"0", 1)
	install(otherVersion)
	os.Remove(pidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor("relaunch with another etcd version on disk", func(s host.ServiceStatus) bool {
		return strings.Contains(s.Detail, "restarting after") && strings.Contains(s.Detail, controlplane.ErrBinary.Error())
	})
	if _, err := os.Stat(pidFile); err == nil {
		t.Fatal("a relaunch ran an etcd binary that is not the pinned version")
	}
	install(script)
	waitFor("relaunch once the pinned binary is back", func(s host.ServiceStatus) bool { return s.Running })
	pid = readPid()

	// A restart (a renewal's, a quota change's) with such a binary on disk
	// is refused before it stops the running etcd.
	install(otherVersion)
	if err := sup.RestartService(ctx, ha.ServiceEtcd); err == nil || !strings.Contains(err.Error(), controlplane.ErrBinary.Error()) || !strings.Contains(err.Error(), "it was not stopped") {
		t.Fatalf("a restart with another etcd version on disk: %v, want it refused before the stop", err)
	}
	if s := status(); !s.Running || !strings.Contains(s.Detail, fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("after the refused restart etcd's status is %q, want the running pid %d kept", s.Detail, pid)
	}
}

// TestEtcdStatusSaysItsBinarysVersion: a member downgraded by `stratum etcd
// downgrade` runs the previous minor's etcd. The node's supervisor accepts
// that binary, and etcd's status says its version, which the join's and the
// rejoin's version checks read; it said the pinned one, and refused the
// binary, so a downgraded node could not start again. A member that has not
// served yet (a bring-up, a join) is refused the previous minor, and any
// other version is refused.
func TestEtcdStatusSaysItsBinarysVersion(t *testing.T) {
	_, h := onTempHost(t)
	binDir := t.TempDir()
	if err := os.Chmod(binDir, 0o755); err != nil { // whatever the umask made it
		t.Fatal(err)
	}
	etcd := filepath.Join(binDir, controlplane.EtcdBinary)
	says := func(v string) {
		t.Helper()
		os.Remove(etcd)
		if err := os.WriteFile(etcd, []byte("#!/bin/sh\necho 'etcd Version: "+strings.TrimPrefix(v, "v")+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	sup, err := a.nodeSupervisor(h, ha.NewNode(ha.Env{Host: h}), binDir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Shutdown()
	ctx := context.Background()
	statusVersion := func() string {
		t.Helper()
		s, err := sup.ServiceStatus(ctx, ha.ServiceEtcd)
		if err != nil {
			t.Fatal(err)
		}
		return s.Version
	}
	// A port in use (another test's etcd) is another refusal; the binary's
	// own is what is judged here.
	binaryRefused := func() error {
		err := sup.CheckServices(ctx, []string{ha.ServiceEtcd})
		if err != nil && !strings.Contains(err.Error(), controlplane.ErrBinary.Error()) && strings.Contains(err.Error(), "is in use") {
			return nil
		}
		return err
	}
	says(version.EtcdPrevious)
	if err := binaryRefused(); err == nil || !strings.Contains(err.Error(), "has not served yet") {
		t.Fatalf("the previous minor's etcd on a node without a member that served: %v, want it refused", err)
	}
	// The rule is the start's, made before anything changes: a launch of
	// the previous minor is not refused for it (a rejoin of a downgraded
	// member launches it after recording its member as not yet served).
	launch := etcdCommand(h, &binaryVersion{bins: controlplane.Binaries{Dir: binDir}, name: controlplane.EtcdBinary, last: version.Etcd, state: h})
	if _, err := launch(); errors.Is(err, controlplane.ErrBinary) {
		t.Fatalf("the launch of the previous minor's etcd for a member not yet served: %v, want the binary accepted", err)
	}
	if err := nodestate.Save(h, &nodestate.NodeState{NodeName: "cp1", NodeIP: "127.0.0.1", Etcd: nodestate.Etcd{Name: "cp1", Started: true}}); err != nil {
		t.Fatal(err)
	}
	if err := binaryRefused(); err != nil {
		t.Fatalf("the previous minor's etcd of a member that served (a downgrade's): %v", err)
	}
	if got := statusVersion(); got != version.EtcdPrevious {
		t.Fatalf("etcd's status says %s, want the binary's %s", got, version.EtcdPrevious)
	}
	says(version.Etcd)
	if err := binaryRefused(); err != nil {
		t.Fatalf("the pinned etcd refused: %v", err)
	}
	if got := statusVersion(); got != version.Etcd {
		t.Fatalf("etcd's status says %s after the pinned binary is back, want %s", got, version.Etcd)
	}
	says("v3.5.0")
	if err := binaryRefused(); err == nil || !strings.Contains(err.Error(), controlplane.ErrBinary.Error()) || !strings.Contains(err.Error(), "3.5.0") {
		t.Fatalf("etcd 3.5.0: %v, want it refused", err)
	}

	// A kube-apiserver of another version swapped in under the running
	// supervisor is refused at its launch, not only at the supervisor's
	// start, and never runs.
	ran := filepath.Join(binDir, "apiserver-ran")
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Kubernetes " + version.Kubernetes + "0'; exit 0; fi\ntouch " + ran + "\nexec sleep 600\n"
	if err := os.WriteFile(filepath.Join(binDir, controlplane.APIServerBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sup.StartService(sctx, ha.ServiceAPIServer); err == nil || !strings.Contains(err.Error(), controlplane.ErrBinary.Error()) || !strings.Contains(err.Error(), version.Kubernetes+"0") {
		t.Fatalf("the launch of kube-apiserver %s0: %v, want it refused", version.Kubernetes, err)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("a kube-apiserver that is not the pinned version was launched")
	}
}

// TestUnitRunsTheStratumAsInvoked: the unit names the stratum `stratum
// install` was invoked as when that is this binary (through a link, so
// moving the link to the next release moves the unit with it), and this
// binary's own path otherwise.
func TestUnitRunsTheStratumAsInvoked(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "stratum")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	if got, err := unitExecPath(link); err != nil || got != link {
		t.Errorf("invoked through the link %s: the unit runs %q (%v), want the link", link, got, err)
	}
	other := filepath.Join(t.TempDir(), "stratum")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, argv0 := range []string{other, "/nonexistent/stratum", "no-such-stratum-on-path", "/proc/self/exe"} {
		if got, err := unitExecPath(argv0); err != nil || got != self {
			t.Errorf("invoked as %s, which is not this binary: the unit runs %q (%v), want %s", argv0, got, err, self)
		}
	}
}

// TestSupervisorRefusesAReplaceableStratum: run by root through a link in a
// directory others may write (a release's link moved there after `stratum
// install` checked it), the supervisor's start refuses: root would run, at
// every boot, a stratum another user can replace.
func TestSupervisorRefusesAReplaceableStratum(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the check applies to root, which systemd runs the unit as")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "stratum")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	if err := refuseReplaceableSelf(link); err == nil || !strings.Contains(err.Error(), "is writable by its group or others") {
		t.Fatalf("a stratum run through a link in a world-writable directory: %v, want it refused", err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := refuseReplaceableSelf(link); err != nil {
		t.Fatalf("a stratum run through a link root alone may change: %v", err)
	}
}

// TestRetriesStoppedIsNoRefusal: a supervisor stopped while it retried its
// start, whose last attempt was refused as busy (a maintenance command held
// the node's locks), does not exit 3 saying nothing was changed: it ran the
// node's etcd voter between the attempts and stops it now, which it says.
func TestRetriesStoppedIsNoRefusal(t *testing.T) {
	busy := ha.Refusal(errors.New("node busy: the node's maintenance lock is held by stratum certs renew; nothing was changed: wait for it to finish"))
	err := retriesStopped(busy)
	if ha.IsRefusal(err) || !strings.Contains(err.Error(), "this node's etcd, kept running between the attempts, stops with it") || !strings.Contains(err.Error(), "node busy") {
		t.Fatalf("retriesStopped(a busy refusal) = %v (refusal %t); want no refusal (exit 1), the last attempt's failure and that etcd stops with the supervisor", err, ha.IsRefusal(err))
	}
}
