package ha

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/units"
)

// EtcdSpaceWarnAt is the share of its quota at which a member's database is
// warned about (`stratum etcd health`, `stratum status`): at the quota etcd
// raises NOSPACE and refuses every write, Lease renewals with them, so the
// VIP is held nowhere and no apiserver can write.
const EtcdSpaceWarnAt = 0.8

// SpaceWarning says how full m's database is when it fills EtcdSpaceWarnAt
// of its quota or more, and what frees it; "" otherwise, and for a member
// that did not answer.
func (m EtcdMemberHealth) SpaceWarning() string {
	if m.Err != nil || m.DBQuota <= 0 || float64(m.DBSize) < EtcdSpaceWarnAt*float64(m.DBQuota) {
		return ""
	}
	return fmt.Sprintf("etcd member %x (%s): its database is %s, %d%% of its %s quota (%s of it in use); at the quota etcd refuses every write: `stratum etcd defrag` gives back what compaction freed; if the data in use fills it, delete what fills it (stratum runs etcd at its default quota)",
		m.ID, m.Endpoint, units.Bytes(m.DBSize), 100*m.DBSize/m.DBQuota, units.Bytes(m.DBQuota), units.Bytes(m.DBSizeInUse))
}

// EtcdSpaceWarnings asks every started member, listed through this node's
// own member, how full its database is, and returns the SpaceWarning of each
// that fills EtcdSpaceWarnAt of its quota or more. The operator logs them.
func (n *Node) EtcdSpaceWarnings(ctx context.Context) ([]string, error) {
	st, err := nodestate.Load(n.env.Host)
	if err != nil {
		return nil, fmt.Errorf("etcd space: %w", err)
	}
	ips, err := n.MemberClientIPsVia(ctx, []string{urlHostOf(st.Etcd.ClientURL)})
	if err != nil {
		return nil, fmt.Errorf("etcd space: %w", err)
	}
	res, _ := n.EtcdClusterHealth(ctx, ips)
	var out []string
	for _, m := range res {
		if w := m.SpaceWarning(); w != "" {
			out = append(out, w)
		}
	}
	return out, nil
}

// defragMemberWithin bounds one member's defragmentation: etcd rewrites the
// whole database, about a minute for its 2 GiB default quota on a slow disk.
const defragMemberWithin = 10 * time.Minute

// defragHealthyWithin bounds the wait, after a member's defragmentation, for
// the cluster to be healthy again before the next member's.
const defragHealthyWithin = time.Minute

// EtcdMemberDefrag is one member's defragmentation: its database's size
// before and after (after is 0 in a dry run), and how long it took.
type EtcdMemberDefrag struct {
	Name     string        `json:"name"`
	Endpoint string        `json:"endpoint"`
	Leader   bool          `json:"leader"`
	Before   int64         `json:"sizeBefore"`
	InUse    int64         `json:"sizeInUse"`
	After    int64         `json:"sizeAfter,omitempty"`
	Took     time.Duration `json:"took,omitempty"`
}

// EtcdDefrag is what DefragmentEtcd did, or, in a dry run, would do.
type EtcdDefrag struct {
	// CompactRevision is the revision the history was compacted to before
	// the defragmentation, 0 for none: only a cluster with a NOSPACE alarm
	// is compacted, as its apiservers cannot compact it (their compaction is
	// a write); otherwise they compact it every 5 minutes themselves.
	CompactRevision int64 `json:"compactRevision,omitempty"`
	// Members in the order they are defragmented: the leader last.
	Members []EtcdMemberDefrag `json:"members"`
	// NoSpace: a NOSPACE alarm was raised; Disarmed: it was disarmed after.
	NoSpace  bool `json:"noSpace"`
	Disarmed bool `json:"disarmed"`
}

// DefragmentEtcd gives back to the disk the space etcd's databases hold free
// (what compaction freed: etcd reuses it, but its file never shrinks, and
// its quota counts the file), one member at a time, each only once the
// cluster is healthy again after the one before, and the leader last. A
// member answers nothing while it is defragmented, which is why two at once
// could cost the quorum, and why a cluster that is not healthy is refused
// (a NOSPACE alarm is the one alarm allowed: clearing it is what this is
// for). With a NOSPACE alarm raised, the history is compacted to the current
// revision first, and the alarm is disarmed once every member's database is
// under its quota again. via are the client IPs the member list is read
// through. Every step can be run again: a re-run after an interruption
// defragments every member again.
func (n *Node) DefragmentEtcd(ctx context.Context, via []string, dryRun bool, progress func(EtcdMemberDefrag)) (rep EtcdDefrag, err error) {
	var changed bool
	defer refuseUntilChanged(&err, &changed)
	plan, nospace, err := n.planDefrag(ctx, via)
	if err != nil {
		return EtcdDefrag{}, err
	}
	rep = EtcdDefrag{Members: make([]EtcdMemberDefrag, len(plan)), NoSpace: nospace}
	for i, m := range plan {
		rep.Members[i] = EtcdMemberDefrag{Name: m.name, Endpoint: m.health.Endpoint, Leader: m.leader, Before: m.health.DBSize, InUse: m.health.DBSizeInUse}
	}
	if dryRun {
		return rep, nil
	}
	if rep.NoSpace {
		changed = true
		if rep.CompactRevision, err = n.compactForSpace(ctx, plan); err != nil {
			return rep, err
		}
	}
	for i, m := range plan {
		changed = true
		if err := n.defragMember(ctx, m.health.Endpoint, &rep.Members[i]); err != nil {
			return rep, fmt.Errorf("%w; members not defragmented yet: %s; run the same command again", err, strings.Join(defragNames(plan[i:]), ", "))
		}
		if progress != nil {
			progress(rep.Members[i])
		}
		if err := n.waitDefragHealthy(ctx, via); err != nil {
			return rep, fmt.Errorf("after defragmenting %s: %w; stopped before %s: run the same command again once the cluster is healthy", m.name, err, orNone(defragNames(plan[i+1:])))
		}
	}
	if rep.NoSpace {
		rep.Disarmed, err = n.disarmNoSpace(ctx, plan)
	}
	return rep, err
}

// defragTarget is one member as DefragmentEtcd plans it.
type defragTarget struct {
	name   string
	leader bool
	health EtcdMemberHealth
}

// planDefrag reads the members through via and asks each for its status:
// refused when a member has not started, or the cluster is not healthy
// apart from NOSPACE alarms. It returns the members with the leader last,
// and whether a NOSPACE alarm is raised.
func (n *Node) planDefrag(ctx context.Context, via []string) ([]defragTarget, bool, error) {
	ms, err := n.members(ctx, via, "etcd defrag")
	if err != nil {
		return nil, false, fmt.Errorf("%w; nothing was changed", err)
	}
	var ips []string
	names := map[string]string{}
	for _, m := range ms {
		if len(m.ClientURLs) == 0 {
			return nil, false, fmt.Errorf("etcd defrag refused: member %x (peer URLs %v) has not started (a join under way, or one that stopped after its member add); nothing was changed: let the join finish, or remove the member, then run this again", m.ID, m.PeerURLs)
		}
		ip := urlHost(m.ClientURLs[0])
		ips = append(ips, ip)
		names[EtcdEndpoint(ip)] = m.Name
	}
	res, _ := n.EtcdClusterHealth(ctx, ips)
	nospace := false
	judged := make([]EtcdMemberHealth, len(res))
	for i, m := range res {
		judged[i] = m
		judged[i].Alarms = slices.DeleteFunc(slices.Clone(m.Alarms), isNoSpace)
		nospace = nospace || len(judged[i].Alarms) < len(m.Alarms)
	}
	if err := clusterVerdict(judged); err != nil {
		return nil, false, fmt.Errorf("etcd defrag refused: %w: %w; nothing was changed: a member being defragmented answers nothing until it is done, so with another member down or cut off the cluster could lose its quorum", ErrClusterUnhealthy, err)
	}
	plan := make([]defragTarget, len(res))
	for i, m := range res {
		plan[i] = defragTarget{name: names[m.Endpoint], leader: m.ID == m.Leader, health: m}
	}
	slices.SortStableFunc(plan, func(a, b defragTarget) int {
		switch {
		case a.leader == b.leader:
			return 0
		case a.leader:
			return 1
		default:
			return -1
		}
	})
	return plan, nospace, nil
}

// compactForSpace compacts the history to the current revision, the revision
// the first member of plan reports, and waits until the compaction is
// applied to the database, so the defragmentation can give its space back.
func (n *Node) compactForSpace(ctx context.Context, plan []defragTarget) (int64, error) {
	ep := plan[0].health.Endpoint
	cli, err := n.etcdClient(ep)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	st, err := cli.Status(rctx, ep)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("etcd defrag: %w of %s, for the revision to compact to: %w; nothing was changed", ErrEtcdNoStatus, ep, err)
	}
	rev := st.Header.GetRevision()
	wctx, cancel := context.WithTimeout(ctx, defragMemberWithin)
	defer cancel()
	if _, err := cli.Compact(wctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, fmt.Errorf("etcd defrag: compact the history to revision %d through %s: %w; nothing was defragmented", rev, ep, err)
	}
	n.log.Info("etcd history compacted for the NOSPACE alarm", "revision", rev)
	return rev, nil
}

// defragMember defragments the member at ep and records its size after and
// the time it took in d.
func (n *Node) defragMember(ctx context.Context, ep string, d *EtcdMemberDefrag) error {
	cli, err := n.etcdClient(ep)
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, defragMemberWithin)
	_, err = cli.Defragment(dctx, ep)
	cancel()
	d.Took = time.Since(start)
	if err != nil {
		return fmt.Errorf("etcd defrag of %s (%s): %w", d.Name, ep, err)
	}
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	if st, err := cli.Status(rctx, ep); err == nil {
		d.After = st.DbSize
	}
	n.log.Info("etcd member defragmented", "member", d.Name, "before", d.Before, "after", d.After, "took", d.Took)
	return nil
}

// waitDefragHealthy waits until the cluster read through via is healthy
// apart from NOSPACE alarms, at most defragHealthyWithin.
func (n *Node) waitDefragHealthy(ctx context.Context, via []string) error {
	wctx, cancel := context.WithTimeout(ctx, defragHealthyWithin)
	defer cancel()
	for {
		_, _, err := n.planDefrag(wctx, via)
		if err == nil {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("the cluster is not healthy %s later: %w", defragHealthyWithin, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// disarmNoSpace disarms every NOSPACE alarm once every member's database is
// under its quota again; it leaves them raised, with why, when one is not
// (the data in use fills it: etcd would raise the alarm again at the next
// write). A database still near its quota is disarmed and warned about by
// the caller (SpaceWarning).
func (n *Node) disarmNoSpace(ctx context.Context, plan []defragTarget) (bool, error) {
	var eps []string
	for _, m := range plan {
		eps = append(eps, m.health.Endpoint)
	}
	cli, err := n.etcdClient(eps...)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	for _, m := range plan {
		rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
		st, err := cli.Status(rctx, m.health.Endpoint)
		cancel()
		if err != nil {
			return false, fmt.Errorf("etcd defrag: every member was defragmented; %w of %s: %w; the NOSPACE alarm stays: run the same command again", ErrEtcdNoStatus, m.health.Endpoint, err)
		}
		if st.DbSizeQuota > 0 && st.DbSize >= st.DbSizeQuota {
			return false, fmt.Errorf("etcd defrag: every member was defragmented, and %s's database is still %s of its %s quota (%s in use): the data itself fills it; the NOSPACE alarm stays: delete what fills it (many or large objects: kubectl get events -A, Secrets, ConfigMaps; deletes are taken under NOSPACE), then run this again", m.name, units.Bytes(st.DbSize), units.Bytes(st.DbSizeQuota), units.Bytes(st.DbSizeInUse))
		}
	}
	rctx, cancel := context.WithTimeout(ctx, etcdWriteTimeout)
	al, err := cli.AlarmList(rctx)
	cancel()
	if err != nil {
		return false, fmt.Errorf("etcd defrag: every member was defragmented; list the alarms to disarm NOSPACE: %w; run the same command again", err)
	}
	for _, a := range al.Alarms {
		if a.Alarm != etcdserverpb.AlarmType_NOSPACE {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, etcdWriteTimeout)
		_, err := cli.AlarmDisarm(wctx, (*clientv3.AlarmMember)(a))
		cancel()
		if err != nil {
			return false, fmt.Errorf("etcd defrag: every member was defragmented; disarm member %x's NOSPACE alarm: %w; run the same command again", a.MemberID, err)
		}
		n.log.Info("etcd NOSPACE alarm disarmed", "member", fmt.Sprintf("%x", a.MemberID))
	}
	return true, nil
}

func defragNames(plan []defragTarget) []string {
	var out []string
	for _, m := range plan {
		out = append(out, m.name)
	}
	return out
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none (it was the last)"
	}
	return strings.Join(names, ", ")
}
