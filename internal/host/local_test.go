package host

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestLocalAddressesRoutableFirstLoopbackKept checks the kernel's own list:
// 127.0.0.1 is an address of this host (a --node-ip of it is local), and a
// routable address, when the machine has one, comes before every loopback
// one so that detection picks it.
func TestLocalAddressesRoutableFirstLoopbackKept(t *testing.T) {
	addrs, err := (&Local{}).Addresses()
	if err != nil {
		t.Fatal(err)
	}
	loop := netip.MustParseAddr("127.0.0.1")
	seenLoop, hasLoop := false, false
	for _, a := range addrs {
		if a == loop {
			hasLoop = true
		}
		if a.IsLoopback() {
			seenLoop = true
		} else if seenLoop {
			t.Errorf("routable %s listed after a loopback address: %v", a, addrs)
		}
	}
	if !hasLoop {
		t.Errorf("127.0.0.1 missing from this host's addresses %v", addrs)
	}
}

// recordingRunner records the commands TrustCIDR runs; tools lists the
// commands it has, and fail makes a command (by its op, "-C" or "-I") exit
// with that code.
type recordingRunner struct {
	tools map[string]bool
	fail  map[string]int
	ran   []string
	// copies, when set, is how many copies of the rule are there: -C
	// finds one (exit 1 for none), -D deletes one.
	copies *int
}

// exitStatus is a command's nonzero exit, as *exec.ExitError reports it.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

// LookPath finds a bare name in tools at /usr/sbin (on PATH), and an
// absolute path only when tools holds it.
func (r *recordingRunner) LookPath(name string) (string, error) {
	if !r.tools[name] {
		return "", errors.New("not found")
	}
	if strings.HasPrefix(name, "/") {
		return name, nil
	}
	return "/usr/sbin/" + name, nil
}

func (r *recordingRunner) Run(name string, args ...string) ([]byte, error) {
	r.ran = append(r.ran, name+" "+strings.Join(args, " "))
	if r.copies != nil {
		switch {
		case slices.Contains(args, "-C") && *r.copies == 0:
			return []byte("iptables: Bad rule.\n"), exitStatus(1)
		case slices.Contains(args, "-D"):
			*r.copies--
		}
	}
	for _, a := range args {
		switch code := r.fail[a]; code {
		case 0:
		case 4:
			return []byte("Another app is currently holding the xtables lock. Stopped waiting after 5s.\n"), exitStatus(code)
		default:
			return []byte("iptables: Bad rule.\n"), exitStatus(code)
		}
	}
	return nil, nil
}

// rule and rule6 are the rules TrustCIDR and UntrustCIDR check, insert and
// delete for the tests' IPv4 and IPv6 pod ranges.
const (
	rule  = "INPUT -s 10.244.0.0/16 -m comment --comment stratum -j ACCEPT"
	rule6 = "INPUT -s fd00::/56 -m comment --comment stratum -j ACCEPT"
)

// TestTrustCIDRWaitsForTheXtablesLock: every iptables invocation carries
// -w, so a rule check or insert waits for the xtables lock another
// program (kube-proxy, the CNI) holds instead of failing.
func TestTrustCIDRWaitsForTheXtablesLock(t *testing.T) {
	both := map[string]bool{"iptables": true, "ip6tables": true}
	runRuleCases(t, "TrustCIDR", (*Local).TrustCIDR, []ruleCase{
		{"absent: checked, then inserted", "10.244.1.0/16", &recordingRunner{tools: both, fail: map[string]int{"-C": 1}},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule, "/usr/sbin/iptables -w 5 -I " + rule}, ""},
		{"present: checked only", "10.244.0.0/16", &recordingRunner{tools: both},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule}, ""},
		{"IPv6: ip6tables", "fd00::/56", &recordingRunner{tools: both, fail: map[string]int{"-C": 1}},
			[]string{"/usr/sbin/ip6tables -w 5 -C " + rule6, "/usr/sbin/ip6tables -w 5 -I " + rule6}, ""},
		{"no iptables: nothing run", "10.244.0.0/16", &recordingRunner{}, nil, ""},
		// A root shell from `su` without `-`: PATH lacks the sbin
		// directories, and the rule was skipped.
		{"off PATH, in /sbin: found there", "10.244.1.0/16", &recordingRunner{tools: map[string]bool{"/sbin/iptables": true}, fail: map[string]int{"-C": 1}},
			[]string{"/sbin/iptables -w 5 -C " + rule, "/sbin/iptables -w 5 -I " + rule}, ""},
		{"insert refused: the tool's words", "10.244.0.0/16", &recordingRunner{tools: both, fail: map[string]int{"-C": 1, "-I": 1}},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule, "/usr/sbin/iptables -w 5 -I " + rule}, "iptables: Bad rule."},
		// The check timed out on the lock (exit 4): whether the rule is
		// there is not known, and inserting could add it twice.
		{"check without the lock: nothing inserted", "10.244.0.0/16", &recordingRunner{tools: both, fail: map[string]int{"-C": 4}},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule}, "holding the xtables lock"},
	})
}

// ruleCase is a case of TrustCIDR or UntrustCIDR: the range, the runner
// (which tools it has, which of their operations fail with which exit
// code), the commands it must run and the error it must return ("" none).
type ruleCase struct {
	name    string
	cidr    string
	r       *recordingRunner
	want    []string
	wantErr string
}

// runRuleCases runs each case of call (named name) as a subtest.
func runRuleCases(t *testing.T, name string, call func(*Local, netip.Prefix) error, cases []ruleCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := call(&Local{commands: tc.r}, netip.MustParsePrefix(tc.cidr))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("%s = %v, want error %q", name, err, tc.wantErr)
			}
			if strings.Join(tc.r.ran, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("ran\n%s\nwant\n%s", strings.Join(tc.r.ran, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestUntrustCIDRDeletesOnlyWhatIsThere: UntrustCIDR deletes the rule
// TrustCIDR inserted when iptables -C finds it, does nothing when it is
// absent (exit 1) or there is no iptables, and fails, deleting nothing,
// when the check says nothing about it (exit 4: the xtables lock).
func TestUntrustCIDRDeletesOnlyWhatIsThere(t *testing.T) {
	both := map[string]bool{"iptables": true, "ip6tables": true}
	runRuleCases(t, "UntrustCIDR", (*Local).UntrustCIDR, []ruleCase{
		{"present: checked, deleted, checked", "10.244.1.0/16", &recordingRunner{tools: both, copies: new(1)},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule, "/usr/sbin/iptables -w 5 -D " + rule, "/usr/sbin/iptables -w 5 -C " + rule}, ""},
		// An older stratum could insert it twice: each copy goes.
		{"present twice: both deleted", "10.244.0.0/16", &recordingRunner{tools: both, copies: new(2)},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule, "/usr/sbin/iptables -w 5 -D " + rule, "/usr/sbin/iptables -w 5 -C " + rule, "/usr/sbin/iptables -w 5 -D " + rule, "/usr/sbin/iptables -w 5 -C " + rule}, ""},
		{"absent: checked only", "10.244.0.0/16", &recordingRunner{tools: both, fail: map[string]int{"-C": 1}},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule}, ""},
		{"IPv6: ip6tables", "fd00::/56", &recordingRunner{tools: both, copies: new(1)},
			[]string{"/usr/sbin/ip6tables -w 5 -C " + rule6, "/usr/sbin/ip6tables -w 5 -D " + rule6, "/usr/sbin/ip6tables -w 5 -C " + rule6}, ""},
		{"no iptables: nothing run", "10.244.0.0/16", &recordingRunner{}, nil, ""},
		{"check without the lock: nothing deleted", "10.244.0.0/16", &recordingRunner{tools: both, fail: map[string]int{"-C": 4}},
			[]string{"/usr/sbin/iptables -w 5 -C " + rule}, "check for the rule"},
	})
}
