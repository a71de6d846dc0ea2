package ha

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/units"
	"stratum.dev/stratum/internal/version"
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
	return fmt.Sprintf("etcd member %x (%s): its database is %s, %d%% of its %s quota (%s of it in use); at the quota etcd refuses every write: `stratum etcd defrag` gives back what compaction freed; if the data in use fills it, delete what fills it, or raise the quota (`stratum etcd quota SIZE` on each control plane)",
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
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	Leader   bool   `json:"leader"`
	Before   int64  `json:"sizeBefore"`
	InUse    int64  `json:"sizeInUse"`
	// Done: the member was defragmented; After and Quota are its database's
	// size after and its quota (0 when not read).
	Done  bool          `json:"done"`
	After int64         `json:"sizeAfter,omitempty"`
	Quota int64         `json:"quota,omitempty"`
	Took  time.Duration `json:"took,omitempty"`
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
	// Warnings are the members still at 80% of their quota or more after
	// the run (EtcdMemberHealth.SpaceWarning).
	Warnings []string `json:"warnings,omitempty"`
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
		if rep.CompactRevision, err = n.compactForSpace(ctx, plan, &changed); err != nil {
			return rep, err
		}
	}
	for i, m := range plan {
		if err := n.defragMember(ctx, &rep.Members[i], &changed); err != nil {
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
		// A member's own compaction runs in the background once applied
		// (only the member asked to compact is waited for): one still at
		// its quota is defragmented once more before its data is said to
		// fill it.
		for i := range rep.Members {
			d := &rep.Members[i]
			if d.Quota == 0 || d.After < d.Quota {
				continue
			}
			if err := n.defragMember(ctx, d, &changed); err != nil {
				return rep, fmt.Errorf("%w (again, as it was still at its quota); the NOSPACE alarm stays: run the same command again", err)
			}
			if err := n.waitDefragHealthy(ctx, via); err != nil {
				return rep, fmt.Errorf("after defragmenting %s again: %w; the NOSPACE alarm stays: run the same command again once the cluster is healthy", d.Name, err)
			}
		}
		if rep.Disarmed, err = n.disarmNoSpace(ctx, rep.Members); err != nil {
			return rep, err
		}
	}
	// What is near its quota still (the data in use, or a quota just
	// over it), said now: after a disarm, a write that does not fit
	// raises NOSPACE again.
	if after, _, err := n.healthyButForSpace(ctx, via, "etcd defrag", "the cluster was healthy before"); err == nil {
		for _, m := range after {
			if w := m.health.SpaceWarning(); w != "" {
				rep.Warnings = append(rep.Warnings, w)
			}
		}
	}
	return rep, nil
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
	plan, nospace, err := n.healthyButForSpace(ctx, via, "etcd defrag", "a member being defragmented answers nothing until it is done")
	if err != nil {
		return nil, false, err
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

// healthyButForSpace reads the members through via and asks each for its
// status: op is refused (why says what of op needs the quorum) when a member
// has not started, or the cluster is not healthy apart from NOSPACE alarms,
// which op is a way out of. It returns the members, and whether a NOSPACE
// alarm is raised. It is the check before op changes anything; after a
// change, spaceHealth says the same without the refusal's words.
func (n *Node) healthyButForSpace(ctx context.Context, via []string, op, why string) ([]defragTarget, bool, error) {
	plan, nospace, err := n.spaceHealth(ctx, via, op)
	switch {
	case errors.Is(err, errLearnerMember):
		return nil, false, fmt.Errorf("%s refused: %w; nothing was changed: let the join finish (the operator promotes a started learner within 30 s), or remove the member, then run this again", op, err)
	case errors.Is(err, ErrClusterUnhealthy):
		return nil, false, fmt.Errorf("%s refused: %w; nothing was changed: %s, so with another member down or cut off the cluster could lose its quorum", op, err, why)
	case err != nil:
		return nil, false, fmt.Errorf("%w; nothing was changed", err)
	}
	return plan, nospace, nil
}

// errLearnerMember marks spaceHealth's finding of a member that is a learner
// or has not started.
var errLearnerMember = errors.New("a member is a learner or has not started")

// spaceHealth is healthyButForSpace's judgement as what it finds, for op:
// the member list unread, a member not started (errLearnerMember), the
// cluster unhealthy apart from NOSPACE alarms (ErrClusterUnhealthy).
func (n *Node) spaceHealth(ctx context.Context, via []string, op string) ([]defragTarget, bool, error) {
	ms, err := n.members(ctx, via, op)
	if err != nil {
		return nil, false, err
	}
	var ips []string
	names := map[string]string{}
	for _, m := range ms {
		if len(m.ClientURLs) == 0 || m.IsLearner {
			return nil, false, fmt.Errorf("%w: member %x (peer URLs %v) (a join under way, or one that stopped after its member add; etcd serves a learner no alarm list, so its health is not known)", errLearnerMember, m.ID, m.PeerURLs)
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
		return nil, false, fmt.Errorf("%w: %w", ErrClusterUnhealthy, err)
	}
	plan := make([]defragTarget, len(res))
	for i, m := range res {
		plan[i] = defragTarget{name: names[m.Endpoint], leader: m.ID == m.Leader, health: m}
	}
	return plan, nospace, nil
}

// compactForSpace compacts the history to the current revision, the revision
// the first member of plan reports, and waits until the compaction is
// applied to that member's database. *changed is set once the compaction is
// asked for.
func (n *Node) compactForSpace(ctx context.Context, plan []defragTarget, changed *bool) (int64, error) {
	ep := plan[0].health.Endpoint
	cli, err := n.etcdClient(ep)
	if err != nil {
		return 0, fmt.Errorf("etcd defrag: %w; nothing was changed", err)
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
	*changed = true
	if _, err := cli.Compact(wctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, fmt.Errorf("etcd defrag: compact the history to revision %d through %s: %w; nothing was defragmented", rev, ep, err)
	}
	n.log.Info("etcd history compacted for the NOSPACE alarm", "revision", rev)
	return rev, nil
}

// defragMember defragments the member d names and records in d its size
// after, its quota and the time it took. *changed is set once the
// defragmentation is asked for.
func (n *Node) defragMember(ctx context.Context, d *EtcdMemberDefrag, changed *bool) error {
	ep := d.Endpoint
	cli, err := n.etcdClient(ep)
	if err != nil {
		return fmt.Errorf("etcd defrag of %s: %w", d.Name, err)
	}
	defer cli.Close()
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, defragMemberWithin)
	*changed = true
	err = n.waitingOn(fmt.Sprintf("etcd to defragment %s (%s; it answers nothing until it is done)", d.Name, units.Bytes(d.Before)), func() error {
		_, err := cli.Defragment(dctx, ep)
		return err
	})
	cancel()
	d.Took += time.Since(start)
	if err != nil && ctx.Err() != nil {
		// The member goes on defragmenting without its caller.
		return fmt.Errorf("etcd defrag of %s (%s) stopped: %w; etcd goes on defragmenting it on its own: run the same command again once `stratum etcd health` passes", d.Name, ep, context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("etcd defrag of %s (%s): %w", d.Name, ep, err)
	}
	d.Done = true
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	if st, err := cli.Status(rctx, ep); err == nil {
		d.After, d.Quota = st.DbSize, st.DbSizeQuota
	}
	n.log.Info("etcd member defragmented", "member", d.Name, "before", d.Before, "after", d.After, "took", d.Took)
	return nil
}

// waitDefragHealthy waits until the cluster read through via is healthy
// apart from NOSPACE alarms, at most defragHealthyWithin.
func (n *Node) waitDefragHealthy(ctx context.Context, via []string) error {
	err := n.waitHealthyButForSpace(ctx, via, defragHealthyWithin, "etcd defrag", nil)
	if err != nil {
		return fmt.Errorf("the cluster is not healthy %s later: %w", defragHealthyWithin, err)
	}
	return nil
}

// waitHealthyButForSpace polls spaceHealth every 100 ms, after op changed
// something, until it passes and check, when given, accepts the members it
// read; at most within. It returns the last reason it did not, as what was
// found: after a change, not a refusal.
func (n *Node) waitHealthyButForSpace(ctx context.Context, via []string, within time.Duration, op string, check func([]defragTarget) error) error {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error
	for {
		members, _, err := n.spaceHealth(wctx, via, op)
		if err == nil && check != nil {
			err = check(members)
		}
		if err == nil {
			return nil
		}
		// A call the deadline cut short says less than the last one
		// that finished (a member down, say).
		if wctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-wctx.Done():
			return last
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// disarmNoSpace disarms every NOSPACE alarm once every member's database is
// under its quota again (as each was read after its defragmentation); it
// leaves them raised, with why, when one is not (the data in use fills it:
// etcd would raise the alarm again at the next write). One just under its
// quota is disarmed, and DefragmentEtcd warns about it.
func (n *Node) disarmNoSpace(ctx context.Context, members []EtcdMemberDefrag) (bool, error) {
	var eps []string
	for _, d := range members {
		eps = append(eps, d.Endpoint)
		if d.Quota == 0 {
			return false, fmt.Errorf("etcd defrag: every member was defragmented, and %s's size after it is not known (its status did not answer); the NOSPACE alarm stays: run the same command again", d.Name)
		}
		if d.After >= d.Quota {
			return false, fmt.Errorf("etcd defrag: every member was defragmented, and %s's database is still %s of its %s quota (%s in use): the data itself fills it; the NOSPACE alarm stays: delete what fills it (many or large objects: kubectl get events -A, Secrets, ConfigMaps; deletes are taken under NOSPACE) or raise the quota (`stratum etcd quota SIZE` on each control plane), then run this again", d.Name, units.Bytes(d.After), units.Bytes(d.Quota), units.Bytes(d.InUse))
		}
	}
	cli, err := n.etcdClient(eps...)
	if err != nil {
		return false, err
	}
	defer cli.Close()
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

// etcdDefaultQuota is etcd's quota when none is set (storage.DefaultQuotaBytes).
const etcdDefaultQuota int64 = 2 << 30

// effectiveQuota is what a member set to quota runs with.
func effectiveQuota(quota int64) int64 {
	if quota == 0 {
		return etcdDefaultQuota
	}
	return quota
}

// clusterQuota is the quota a joiner takes: the largest its members run
// with, 0 when that is etcd's default. A member with less than the others
// would raise NOSPACE for the whole cluster first.
func clusterQuota(members []EtcdMemberHealth) int64 {
	var q int64
	for _, m := range members {
		q = max(q, m.DBQuota)
	}
	if q == etcdDefaultQuota {
		return 0
	}
	return q
}

// etcdDatabaseSize is the size of this node's etcd database file, 0 when
// there is none (a member that has not started).
func etcdDatabaseSize(h host.Files) (int64, error) {
	db := path.Join(version.EtcdDataDir, "member", "snap", "db")
	fi, err := h.Stat(db)
	switch {
	case err == nil:
		return fi.Size(), nil
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil
	default:
		return 0, fmt.Errorf("the size of this node's etcd database %s: %w", db, err)
	}
}

// warnQuotaNotUsed says that an etcd quota given to `stratum up` on a node
// with saved state (--etcd-quota, spec.etcd.quota in a config file shared by
// every control plane) is a bring-up's setting, not used here, when it is
// not the node's.
func (n *Node) warnQuotaNotUsed(st *nodestate.NodeState, quota int64) {
	if quota == 0 || effectiveQuota(quota) == effectiveQuota(st.Etcd.QuotaBackendBytes) {
		return
	}
	msg := fmt.Sprintf("warning: the etcd quota given (%s) is a bring-up's setting, not used on this node, whose member runs with %s: `stratum etcd quota` changes it, on each control plane in turn",
		units.Bytes(quota), units.Bytes(effectiveQuota(st.Etcd.QuotaBackendBytes)))
	n.log.Warn(msg)
	if n.env.Progress != nil {
		n.env.Progress(msg)
	}
}

// quotaOf is clusterQuota of the members at ips that answer; ok false when
// none does.
func (n *Node) quotaOf(ctx context.Context, ips []string) (quota int64, ok bool) {
	res, _ := n.EtcdClusterHealth(ctx, ips)
	var answered []EtcdMemberHealth
	for _, m := range res {
		if m.Err == nil {
			answered = append(answered, m)
		}
	}
	return clusterQuota(answered), len(answered) > 0
}

// quotaSetWithin bounds the wait, after etcd's restart onto a new quota, for
// the member to serve with it and the cluster to be healthy again.
const quotaSetWithin = time.Minute

// SetEtcdQuota sets this node's etcd member's quota (--quota-backend-bytes)
// to quota bytes, 0 for etcd's default: the quota is each member's own
// flag, so it is run on every control plane in turn, never on two at once
// (each restarts its member). Refusals first: a quota out of bounds, one the
// database now fills to EtcdSpaceWarnAt or more (read from the member, or
// from its file when etcd does not run: it would raise NOSPACE at once, or
// soon), a reset or data replacement under way, or a cluster that is not
// healthy apart from NOSPACE (the member restarts, and with another member
// down its vote could cost the quorum). Then the node state records it, etcd restarts onto it when
// it runs, and SetEtcdQuota waits until the member serves with it and the
// cluster is healthy again. A re-run after an interruption restarts etcd if
// it still runs with the old quota. It reports whether it changed anything,
// and whether it restarted etcd (one that does not run starts with it).
func (n *Node) SetEtcdQuota(ctx context.Context, quota int64) (changed, restarted bool, err error) {
	defer refuseUntilChanged(&err, &changed)
	h := n.env.Host
	if err := controlplane.CheckEtcdQuota(quota); err != nil {
		return false, false, fmt.Errorf("etcd quota refused: %w; nothing was changed", err)
	}
	release, err := nodelock.Acquire(h, nodelock.Maintenance, "stratum etcd quota", n.lockOptions(ctx)...)
	if err != nil {
		return false, false, err
	}
	defer release()
	for _, refuse := range []func(string) error{n.refuseResetUnderWay, n.refuseDataReplaceUnderWay} {
		if err := refuse("stratum etcd quota"); err != nil {
			return false, false, err
		}
	}
	st, err := nodestate.Load(h) // as it is under the lock
	if err != nil {
		return false, false, fmt.Errorf("etcd quota: %w; nothing was changed", err)
	}
	if st.Role != nodestate.RoleControlPlane || st.Etcd.ClientURL == "" {
		return false, false, fmt.Errorf("etcd quota: node state %s is not a control plane's; nothing was changed", nodestate.Path)
	}
	self := urlHostOf(st.Etcd.ClientURL)
	ss, err := h.ServiceStatus(ctx, ServiceEtcd)
	runs := !host.NotRunning(ss, err)
	if runs && err != nil {
		return false, false, fmt.Errorf("etcd quota: status of %s: %w; nothing was changed", ServiceEtcd, err)
	}
	want := effectiveQuota(quota)
	var own EtcdMemberHealth
	if runs {
		own = n.EtcdMemberStatus(ctx, self)
	}
	if effectiveQuota(st.Etcd.QuotaBackendBytes) == want && (!runs || own.Err == nil && own.DBQuota == want) {
		if !runs && n.env.Progress != nil {
			// A run whose restart failed left it so: said, since nothing
			// here starts it.
			n.env.Progress(fmt.Sprintf("etcd does not run on this node: it starts with %s (`stratum up`, or its supervisor)", units.Bytes(want)))
		}
		return false, false, nil
	}
	size := own.DBSize
	if runs && own.Err != nil {
		return false, false, fmt.Errorf("etcd quota refused: this node's member did not answer: %w; nothing was changed", own.Err)
	}
	if !runs {
		// Not running (stopped, or restarting after a failure): its
		// database file says how large it is.
		if size, err = etcdDatabaseSize(h); err != nil {
			return false, false, fmt.Errorf("etcd quota refused: %w; nothing was changed", err)
		}
	}
	if float64(size) >= EtcdSpaceWarnAt*float64(want) {
		return false, false, fmt.Errorf("etcd quota refused: this node's database is %s, %d%% of %s or more: etcd would raise NOSPACE at once, or soon; nothing was changed: `stratum etcd defrag` first, or set a quota of at least %s", units.Bytes(size), int(100*EtcdSpaceWarnAt), units.Bytes(want), units.Bytes(int64(float64(size)/EtcdSpaceWarnAt)+1))
	}
	if runs {
		if _, _, err := n.healthyButForSpace(ctx, []string{self}, "etcd quota", "this node's etcd restarts onto the quota"); err != nil {
			return false, false, err
		}
	}
	changed = true
	st.Etcd.QuotaBackendBytes = quota
	if err := nodestate.Save(h, st); err != nil {
		return true, false, fmt.Errorf("etcd quota: record it in %s: %w; etcd was not restarted: run the same command again", nodestate.Path, err)
	}
	if !runs {
		return true, false, nil // etcd starts with it
	}
	if err := h.RestartService(ctx, ServiceEtcd); err != nil {
		return true, false, fmt.Errorf("etcd quota: the node state records %s; restart etcd onto it: %w; etcd may be stopped (`stratum status` says): `stratum up` starts it with that quota, and this command, run again while it runs, restarts it onto it", units.Bytes(effectiveQuota(quota)), err)
	}
	ep := EtcdEndpoint(self)
	err = n.waitHealthyButForSpace(ctx, []string{self}, quotaSetWithin, "etcd quota", func(members []defragTarget) error {
		for _, m := range members {
			if m.health.Endpoint == ep && m.health.DBQuota != want {
				return fmt.Errorf("this node's member runs with %s", units.Bytes(m.health.DBQuota))
			}
		}
		return nil
	})
	if err != nil {
		return true, true, fmt.Errorf("etcd quota: etcd restarted onto %s, but the member or the cluster is not healthy %s later: %w; run the same command again once it is", units.Bytes(want), quotaSetWithin, err)
	}
	n.log.Info("etcd quota set", "quota", quota)
	return true, true, nil
}
