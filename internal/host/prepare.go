package host

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path"
	"slices"
	"strings"

	"stratum.dev/stratum/internal/version"
)

// NodeDirs are the directories every node needs, created by Dirs.
var NodeDirs = []string{version.K8sConfDir, version.PKIDir, version.EtcdPKIDir, version.StateDir, version.LockDir}

// Dirs creates the node's directory layout. Idempotent.
func Dirs(f Files) error {
	for _, d := range NodeDirs {
		mode := fs.FileMode(0o755)
		if d == version.K8sConfDir || d == version.PKIDir || d == version.EtcdPKIDir || d == version.StateDir {
			mode = 0o700
		}
		if err := f.MkdirAll(d, mode); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

// PrereqOptions are the settings the prerequisites are checked for.
type PrereqOptions struct {
	// Profile is the node profile by name ("" for none).
	Profile string
	// SELinuxOptOut is spec.selinux: false.
	SELinuxOptOut bool
	// BroughtUpBefore is true on a node that has saved state: a re-run, not a
	// first bring-up.
	BroughtUpBefore bool
}

// Profiles are the node profiles stratum knows.
var Profiles = []string{"cis"}

// ProfileProblems lists what is wrong with a profile choice (an unknown
// name, the cis profile with SELinux opted out), without touching the host:
// a bring-up asks before it writes anything.
func ProfileProblems(profile string, selinuxOptOut bool) []string {
	if profile == "" {
		return nil
	}
	var problems []string
	known := false
	for _, p := range Profiles {
		known = known || p == profile
	}
	if !known {
		problems = append(problems, fmt.Sprintf("unknown profile %q (known: %s)", profile, strings.Join(Profiles, ", ")))
	}
	if profile == "cis" && selinuxOptOut {
		problems = append(problems, "the cis profile requires SELinux; remove spec.selinux: false")
	}
	return problems
}

// ErrPrereq matches a failed prerequisite.
var ErrPrereq = errors.New("prerequisite not met")

// Prereqs checks what a control plane needs of its host before anything is
// written: a known profile, a writable state directory (a probe file written,
// fsync'd and removed again, each step's failure a problem), and the node's own
// addresses. The cis profile refuses a SELinux opt-out, which it exists to
// forbid. Each failure names what to fix.
func Prereqs(h Host, o PrereqOptions) error {
	var problems []error
	for _, p := range ProfileProblems(o.Profile, o.SELinuxOptOut) {
		problems = append(problems, errors.New(p))
	}
	probe := path.Join(version.StateDir, ".prereq-probe")
	if err := h.WriteFile(probe, []byte("ok"), 0o600); err != nil {
		problems = append(problems, fmt.Errorf("cannot write %s: %w", version.StateDir, err))
	} else if err := h.Remove(probe); err != nil {
		// A disk that fails the probe's removal (its directory's fsync,
		// say) is failing: an fsync error is reported once, so going on
		// would build on writes it may already have lost.
		problems = append(problems, fmt.Errorf("cannot write %s (the probe file %s could not be removed again; it is harmless if left): %w", version.StateDir, probe, err))
	}
	if addrs, err := h.Addresses(); err != nil || len(addrs) == 0 {
		problems = append(problems, fmt.Errorf("the host reports no address (%v)", err))
	}
	if len(problems) == 0 {
		return nil
	}
	// Each problem stays matchable (errors.Is finds a disk's errno), joined
	// as one line.
	format := "%w: " + strings.Repeat("%w; ", len(problems)) + "nothing was changed"
	return fmt.Errorf(format, append([]any{ErrPrereq}, anys(problems)...)...)
}

func anys(errs []error) []any {
	out := make([]any, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return out
}

// TrustPodCIDRs opens the firewall to the cluster's pod ranges ("a,b" for
// dual-stack). A range that does not parse is skipped with the error
// returned beside the others' success, since the assembly treats pod-CIDR
// trust as best effort: it is the CNI's traffic, not the join's. A range
// holding one of keepOut (the node's own IPs, its VIP) is skipped the same
// way: its network is the node's, and trusting it would open the host to
// every machine there (the bring-up and the join refuse such a range; this
// guards a node state written before they did). Only those addresses are
// judged: a CNI's own bridge holds an address inside the pod range by
// design.
func TrustPodCIDRs(n Network, podCIDRs string, keepOut ...string) error {
	return eachPodCIDR(podCIDRs, func(p netip.Prefix) error {
		if i := slices.IndexFunc(keepOut, func(k string) bool {
			a, err := netip.ParseAddr(strings.TrimSpace(k))
			return err == nil && p.Contains(a.Unmap())
		}); i >= 0 {
			return fmt.Errorf("pod CIDR %s holds the node's address %s: not trusted in the firewall, which would open this host to its own network", p, strings.TrimSpace(keepOut[i]))
		}
		return n.TrustCIDR(p)
	})
}

// UntrustPodCIDRs takes back TrustPodCIDRs' trust of each pod range
// (Network.UntrustCIDR), the errors joined.
func UntrustPodCIDRs(n Network, podCIDRs string) error {
	return eachPodCIDR(podCIDRs, n.UntrustCIDR)
}

// eachPodCIDR runs f on each range of podCIDRs ("a,b"), going on past a
// range that does not parse or that f fails on; the errors are joined.
func eachPodCIDR(podCIDRs string, f func(netip.Prefix) error) error {
	var errs []error
	for _, c := range strings.Split(podCIDRs, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod CIDR %q: %w", c, err))
			continue
		}
		if err := f(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
