package cli

import (
	"strings"
	"testing"
)

// The rejoin, repoint and snapshot commands: bad usage exits 2, a node
// without control-plane state refuses with exit 1 and writes nothing.
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
		{[]string{"snapshot", "save"}, ExitUsage, "accepts 1 arg"},
		{[]string{"snapshot", "restore", "a", "b"}, ExitUsage, "accepts 1 arg"},
		{[]string{"snapshot", "bogus"}, ExitUsage, "unknown command"},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1"}, ExitFail, "no node state"},
		{[]string{"etcd", "rejoin", "--server", "10.0.0.1", "--force"}, ExitFail, "no node state"},
		{[]string{"snapshot", "save", "/tmp/x.db"}, ExitFail, "no control-plane state on this node"},
		{[]string{"snapshot", "restore", "/tmp/x.db"}, ExitFail, "no control-plane state on this node"},
		{[]string{"repoint", "--vip", "10.0.0.10"}, ExitFail, "cluster CA"},
		{[]string{"repoint", "--vip", "10.0.0.10", "--cilium"}, ExitFail, "cluster CA"},
	} {
		opts, h := onTempHost(t)
		code, out, errOut := runCLI(t, opts, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
		if code == ExitFail && out != "" {
			t.Errorf("%v refused, yet printed:\n%s", tc.args, out)
		}
		for p := range filesUnder(t, h.Root) {
			if !strings.HasPrefix(p, "/run/stratum/") {
				t.Errorf("%v wrote %s", tc.args, p)
			}
		}
	}
}
