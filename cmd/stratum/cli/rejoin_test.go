package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// The rejoin, repoint and snapshot commands: bad usage exits 2, a node
// without control-plane state refuses with exit 3 and writes nothing.
func TestRejoinRepointSnapshotUsageAndRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"etcd", "rejoin"}, ExitUsage, "--server is required"},
		{[]string{"etcd", "rejoin", "--server", "cp1"}, ExitUsage, `--server "cp1" is not an IP address`},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1", "extra"}, ExitUsage, "unknown command"},
		{[]string{"repoint"}, ExitUsage, "--vip is required"},
		{[]string{"repoint", "--vip", "vip.example"}, ExitUsage, "is not an IP address"},
		{[]string{"repoint", "--vip", "10.0.0.10", "--cilium", "--rollout-timeout", "0s"}, ExitUsage, "--rollout-timeout must be positive"},
		{[]string{"repoint", "--vip", "10.0.0.10", "--rollout-timeout", "30s"}, ExitUsage, "applies only with --cilium"},
		{[]string{"snapshot", "save"}, ExitUsage, "accepts 1 arg"},
		{[]string{"snapshot", "restore", "a", "b"}, ExitUsage, "accepts 1 arg"},
		{[]string{"snapshot", "bogus"}, ExitUsage, "unknown command"},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1"}, ExitRefused, "no node state"},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1", "--dry-run"}, ExitRefused, "nothing was changed"},
		{[]string{"server", "--vip", "vip.example"}, ExitUsage, `--vip: the VIP "vip.example" is not an IP address`},
		{[]string{"server", "--vip", "fd00::10"}, ExitUsage, "--vip: the VIP fd00::10 is not an IPv4 address"},
		{[]string{"repoint", "--vip", "fd00::10"}, ExitUsage, "is not an IPv4 address"},
		{[]string{"server", "--vip", "::ffff:10.0.0.10"}, ExitUsage, "is not an IPv4 address"},
		{[]string{"server", "--vip", "0.0.0.0"}, ExitUsage, "--vip: the VIP 0.0.0.0 names no single host"},
		{[]string{"repoint", "--vip", "255.255.255.255"}, ExitUsage, "names no single host"},
		{[]string{"up", "--vip", "224.0.0.1"}, ExitUsage, "names no single host"},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1", "--force"}, ExitRefused, "no node state"},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1", "--dry-run"}, ExitRefused, "no node state"},
		{[]string{"etcd", "rejoin", "--server", "https://10.0.0.1:6443", "--dry-run"}, ExitRefused, "no node state"},
		{[]string{"etcd", "rejoin", "--server", "https://cp1.example:6443"}, ExitUsage, `--server "cp1.example" is not an IP address`},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1", "-o", "json"}, ExitUsage, "-o json prints the plan of a --dry-run"},
		{[]string{"snapshot", "save", "/tmp/x.db"}, ExitRefused, "no control-plane state on this node"},
		{[]string{"snapshot", "restore", "/tmp/x.db"}, ExitRefused, "no control-plane state on this node"},
		{[]string{"snapshot", "restore", "/tmp/x.db", "--dry-run"}, ExitRefused, "no control-plane state on this node"},
		{[]string{"repoint", "--vip", "10.0.0.10"}, ExitRefused, "cluster CA"},
		{[]string{"repoint", "--vip", "10.0.0.10", "--cilium"}, ExitRefused, "cluster CA"},
		{[]string{"repoint", "--vip", "10.0.0.10", "--dry-run"}, ExitRefused, "cluster CA"},
		{[]string{"certs", "rekey", "--dry-run"}, ExitRefused, "no control-plane state on this node"},
		{[]string{"certs", "reupload", "--dry-run"}, ExitRefused, "no control-plane state on this node"},
	} {
		opts, h := onTempHost(t)
		code, out, errOut := runCLI(t, opts, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
		if code == ExitRefused && out != "" && !strings.Contains(out, "would be refused") {
			t.Errorf("%v refused, yet printed:\n%s", tc.args, out)
		}
		for p := range filesUnder(t, h.Root) {
			if !strings.HasPrefix(p, "/run/stratum/") {
				t.Errorf("%v wrote %s", tc.args, p)
			}
		}
	}
}

// TestRejoinDryRunJSONCarriesAnEarlyRefusal: a rejoin dry run refused before
// its steps are known (here: no node state) still prints its report with
// -o json, the refusal in `refused`, so a script reading .refused sees why.
func TestRejoinDryRunJSONCarriesAnEarlyRefusal(t *testing.T) {
	opts, _ := onTempHost(t)
	code, out, errOut := runCLI(t, opts, "etcd", "rejoin", "--server", "10.0.0.1", "--dry-run", "-o", "json")
	if code != ExitRefused {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitRefused, out, errOut)
	}
	var rep struct {
		Member, Seed, Refused string
		Steps                 []string
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is no JSON report (%v):\n%s\nstderr:\n%s", err, out, errOut)
	}
	if !strings.Contains(rep.Refused, "no node state") || rep.Seed != "10.0.0.1" || rep.Member != "" || rep.Steps == nil || len(rep.Steps) != 0 {
		t.Fatalf("report = %+v, want the refusal naming the missing node state, the seed, no member and no steps", rep)
	}
}
