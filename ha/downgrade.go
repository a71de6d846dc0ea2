package ha

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/internal/version"
)

// ErrDowngradeNotValidated matches a DowngradeEtcd that failed at its validate
// step, before it asked etcd to change anything.
var ErrDowngradeNotValidated = errors.New("etcd did not validate a downgrade")

// downgradeWaitFor bounds how long DowngradeEtcd waits, once the downgrade is
// enabled, for every member to run the target version.
const downgradeWaitFor = 10 * time.Minute

// downgradePoll is how often DowngradeEtcd looks at the members' versions;
// downgradeReport how often it logs its progress.
const (
	downgradePoll   = 250 * time.Millisecond
	downgradeReport = 2 * time.Second
)

var majorMinor = regexp.MustCompile(`^v?([0-9]+)\.([0-9]+)$`)

// DowngradeEtcd asks the etcd cluster at cpIP to downgrade to target, a
// major.minor version ("3.6"; "v3.6" is accepted): etcd checks that it can,
// then lowers the cluster version and migrates every member's storage down to
// it, so the older etcd can open the data. It is a cluster-wide operation, and
// it ends once every member runs the target version (the operator swaps each
// member's binary meanwhile).
func DowngradeEtcd(cpIP, target string) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.DowngradeEtcd(context.Background(), cpIP, target)
}

// CheckpointDowngradeValidated: etcd has validated the downgrade and its
// enable is not sent yet; a stop here is a refusal with nothing changed.
const CheckpointDowngradeValidated = "downgrade-after-validate"

// DowngradeCheckpoints are a downgrade's checkpoints in order.
var DowngradeCheckpoints = []string{CheckpointDowngradeValidated}

// DowngradeEtcd is the package-level DowngradeEtcd on this node: refusals
// first (bad target, a cluster that is not healthy, etcd's validation), then
// the enable, then progress until every member runs target or
// downgradeWaitFor passes.
func (n *Node) DowngradeEtcd(ctx context.Context, cpIP, target string) (err error) {
	var asked bool // the enable was sent: etcd may have changed
	defer refuseUntilChanged(&err, &asked)
	mm := majorMinor.FindStringSubmatch(strings.TrimSpace(target))
	if mm == nil {
		return fmt.Errorf("etcd downgrade: target %q is not a major.minor version such as 3.6; nothing was asked of etcd", target)
	}
	target = mm[1] + "." + mm[2]
	ep := EtcdEndpoint(cpIP)
	cli, err := n.etcdClient(ep)
	if err != nil {
		return fmt.Errorf("etcd downgrade to %s: %w; nothing was asked of etcd", target, err)
	}
	defer cli.Close()
	ml, err := n.memberList(ctx, cli)
	if err != nil {
		return fmt.Errorf("etcd downgrade to %s: member list from %s: %w; nothing was changed", target, ep, err)
	}
	var hosts []string
	for _, m := range ml.Members {
		if len(m.ClientURLs) == 0 {
			return fmt.Errorf("etcd downgrade to %s: member %x (peer URLs %v) has not started; nothing was changed: start or remove it first", target, m.ID, m.PeerURLs)
		}
		hosts = append(hosts, urlHost(m.ClientURLs[0]))
	}
	// An election or a member restarting (a join's handover, a swap just
	// made) shows as unhealthy for a few seconds: waited out.
	if err := n.waitClusterHealthy(ctx, hosts, "before the downgrade is asked of it (nothing was asked yet)"); err != nil {
		return fmt.Errorf("etcd downgrade to %s refused, nothing was asked of etcd: %w", target, err)
	}
	if done, resume, err := n.downgradeUnderWay(ctx, cpIP, hosts, target); err != nil || done {
		return err
	} else if resume {
		asked = true // enabled by an earlier run: the cluster is mid-change
		n.log.Info("an etcd downgrade to this target is already enabled (an earlier run was interrupted): waiting for it", "target", target)
		return n.waitMembersRun(ctx, hosts, target)
	}
	wctx, cancel := context.WithTimeout(ctx, etcdWriteTimeout)
	_, err = cli.Downgrade(wctx, clientv3.DowngradeValidate, target)
	cancel()
	if err != nil {
		return fmt.Errorf("etcd downgrade to %s through %s: %w: %w; nothing was changed", target, ep, ErrDowngradeNotValidated, err)
	}
	if err := n.checkpoint(ctx, CheckpointDowngradeValidated); err != nil && ctx.Err() == nil {
		return err
	}
	// Validate changes nothing: a stop before the enable is sent leaves the
	// cluster as it was.
	if ctx.Err() != nil {
		return stoppedRefusal(ctx, "etcd downgrade to "+target, ctx.Err())
	}
	asked = true
	wctx, cancel = context.WithTimeout(ctx, etcdWriteTimeout)
	_, err = cli.Downgrade(wctx, clientv3.DowngradeEnable, target)
	cancel()
	if err != nil {
		return fmt.Errorf("etcd downgrade to %s through %s: enable failed: %w; the downgrade may or may not be enabled: run the same command again (it waits for an enabled one), or cancel it (etcdctl downgrade cancel)", target, ep, err)
	}
	n.log.Info("etcd downgrade enabled; swap each member to the target etcd once its storage version is lowered", "target", target, "members", len(hosts))
	return n.waitMembersRun(ctx, hosts, target)
}

// downgradeUnderWay is what an earlier run left, read before etcd is asked to
// validate (which refuses a downgrade already enabled, and one to the version
// the cluster already runs): done when every member at hosts already runs
// target and no downgrade is enabled (a run that finished, or whose end was
// not seen), resume when a downgrade to target is enabled (an interrupted
// run: the re-run waits for it, as the first would have), and a refusal when
// a downgrade to another version is enabled.
func (n *Node) downgradeUnderWay(ctx context.Context, cpIP string, hosts []string, target string) (done, resume bool, err error) {
	st, err := n.EtcdStorageAt(ctx, cpIP)
	if err != nil {
		return false, false, nil // etcd's validation answers for it
	}
	if st.Downgrading {
		if versionMajorMinor(st.DowngradeTarget) == target {
			return false, true, nil
		}
		return false, false, fmt.Errorf("etcd downgrade to %s refused: a downgrade to %s is under way; nothing was changed: finish it (`stratum etcd downgrade %s`) or cancel it (etcdctl downgrade cancel)",
			target, st.DowngradeTarget, versionMajorMinor(st.DowngradeTarget))
	}
	for _, h := range hosts {
		if m := n.EtcdMemberStatus(ctx, h); m.Err != nil || versionMajorMinor(m.Version) != target {
			return false, false, nil
		}
	}
	n.log.Info("every etcd member already runs the target version and no downgrade is enabled: nothing to do", "target", target)
	return true, false, nil
}

// waitMembersRun waits until every member at hosts runs etcd major.minor
// target and etcd has ended the downgrade, logging progress every
// downgradeReport, for up to downgradeWaitFor (or the caller's own bound);
// its error says how long it waited, or that it was stopped.
func (n *Node) waitMembersRun(ctx context.Context, hosts []string, target string) error {
	ctx, cancel := context.WithTimeout(ctx, downgradeWaitFor)
	defer cancel()
	poll := time.NewTicker(downgradePoll)
	defer poll.Stop()
	start := time.Now()
	lastReport := start
	report := waitReporter{n: n}
	for {
		var behind []string
		for _, h := range hosts {
			m := n.EtcdMemberStatus(ctx, h)
			switch {
			case m.Err != nil:
				behind = append(behind, h+" (not answering)")
			case versionMajorMinor(m.Version) != target:
				behind = append(behind, h+" (runs "+m.Version+")")
			}
		}
		if len(behind) == 0 {
			// etcd ends the downgrade itself once its leader sees every
			// member on the target; until then it admits no new member
			// of another version, so a join right after would be refused.
			st, err := n.EtcdStorageAt(ctx, hosts[0])
			if err == nil && !st.Downgrading {
				n.log.Info("etcd downgrade done: every member runs the target version", "target", target)
				return nil
			}
			behind = append(behind, "etcd ending the downgrade (its leader does once it sees every member on "+target+")")
		}
		if time.Since(lastReport) >= downgradeReport {
			lastReport = time.Now()
			n.log.Info("etcd downgrade in progress", "target", target, "waiting for", strings.Join(behind, ", "))
		}
		report.waiting("every member to run etcd %s: swap each to that etcd once its storage is lowered (behind: %s)", target, strings.Join(behind, ", "))
		select {
		case <-ctx.Done():
			waited := "stopped while waiting"
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				waited = fmt.Sprintf("waited %s", time.Since(start).Round(time.Second))
			}
			return fmt.Errorf("etcd downgrade to %s: enabled, but not every member runs %s (%s; %s): %w; the downgrade stays enabled: swap the remaining members to etcd %s and run it again, or cancel it (etcdctl downgrade cancel)",
				target, target, strings.Join(behind, ", "), waited, ctx.Err(), target)
		case <-poll.C:
		}
	}
}

// versionMajorMinor is "3.6" of "3.6.16" (parseMajorMinor's reading), or v
// when it is not a version.
func versionMajorMinor(v string) string {
	if major, minor, ok := version.MajorMinor(v); ok {
		return fmt.Sprintf("%d.%d", major, minor)
	}
	return v
}
