package ha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// Checkpoints of an etcd rejoin (RejoinEtcd), in the order a rejoin reaches
// them. A crash at any of them leaves a node that a re-run of the same
// command converges: it plans the remaining steps from what it observes.
const (
	// CheckpointRejoinStart: refusals passed, locks held, nothing changed.
	CheckpointRejoinStart = "rejoin-start"
	// CheckpointRejoinAfterStop: the local control plane is stopped.
	CheckpointRejoinAfterStop = "rejoin-after-stop"
	// CheckpointRejoinAfterWipe: the stale etcd data directory is gone.
	CheckpointRejoinAfterWipe = "rejoin-after-wipe"
	// CheckpointRejoinAfterMemberRemove: this node's stale started member is
	// gone from the seed; it is not yet added back.
	CheckpointRejoinAfterMemberRemove = "rejoin-after-member-remove"
	// CheckpointRejoinAfterMemberAdd: the seed's etcd has this node as a
	// learner; the node state still records the old membership.
	CheckpointRejoinAfterMemberAdd = "rejoin-after-member-add"
	// CheckpointRejoinAfterStateSave: the node state records the seed's
	// membership (state "existing"); etcd not yet started.
	CheckpointRejoinAfterStateSave = "rejoin-after-state-save"
	// CheckpointRejoinAfterEtcdStart: the rejoined member runs as a learner,
	// not yet promoted.
	CheckpointRejoinAfterEtcdStart = "rejoin-after-etcd-start"
)

// RejoinCheckpoints are the rejoin's checkpoints in order.
var RejoinCheckpoints = []string{
	CheckpointRejoinStart, CheckpointRejoinAfterStop, CheckpointRejoinAfterWipe, CheckpointRejoinAfterMemberRemove,
	CheckpointRejoinAfterMemberAdd, CheckpointRejoinAfterStateSave, CheckpointRejoinAfterEtcdStart,
}

// ErrOldClusterQuorum matches a rejoin refused without force because the
// etcd cluster this node's data belongs to may still have a quorum: wiping
// the data would drop a member of a working cluster.
var ErrOldClusterQuorum = errors.New("this node's old etcd cluster may still have a quorum")

// rejoinReportEvery is how often a rejoin reports, through its writer, that
// it is still waiting for its learner to catch up.
const rejoinReportEvery = 5 * time.Second

// RejoinEtcd makes this control plane a member of the seed's etcd cluster
// after a snapshot restore there (`stratum etcd rejoin --server <cp1>`).
func RejoinEtcd(ctx context.Context, w io.Writer, cp1IP string, force bool) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.RejoinEtcd(ctx, w, cp1IP, force)
}

// planRejoinHere reads this node's state, observes the seed and the local
// etcd, and plans the rejoin's remaining steps; it changes nothing.
func (n *Node) planRejoinHere(ctx context.Context, cp1IP string) (*nodestate.NodeState, rejoinObservation, []rejoinStep, error) {
	st, err := nodestate.Load(n.env.Host)
	if errors.Is(err, nodestate.ErrNoState) {
		return nil, rejoinObservation{}, nil, fmt.Errorf("etcd rejoin: %w; nothing was changed: the rejoin moves a control plane's member to the restored seed; a machine that is none joins with a join command (`stratum server`)", err)
	}
	if err != nil {
		return nil, rejoinObservation{}, nil, fmt.Errorf("etcd rejoin: %w; nothing was changed", err)
	}
	if st.Role != nodestate.RoleControlPlane || st.Etcd.Name == "" || st.Etcd.PeerURL == "" {
		return nil, rejoinObservation{}, nil, fmt.Errorf("etcd rejoin: node state %s is not a control plane's with an etcd member; nothing was changed", nodestate.Path)
	}
	self := urlHostOf(st.Etcd.ClientURL)
	if cp1IP == self || cp1IP == st.NodeIP {
		return nil, rejoinObservation{}, nil, fmt.Errorf("etcd rejoin: %s is this node; nothing was changed: run the rejoin on the other control planes, naming the restored seed", cp1IP)
	}
	obs, err := n.observeRejoin(ctx, st, cp1IP, self)
	if err != nil {
		return nil, rejoinObservation{}, nil, err
	}
	return st, obs, planRejoin(obs), nil
}

// RejoinPlanReport is what a rejoin would do, as RejoinPlanOf observes it.
// The JSON names are stable (docs/cli.md, `etcd rejoin --dry-run -o json`).
type RejoinPlanReport struct {
	// Member is this node's etcd member name; Seed the seed's IP and
	// SeedClusterID its cluster ID.
	Member        string `json:"member"`
	Seed          string `json:"seed"`
	SeedClusterID string `json:"seedClusterID"`
	// Steps are the steps a rejoin would run, in order (stop, wipe,
	// member-remove, member-add, state-save, start); only start when the
	// node already belongs to the seed's cluster (the re-run starts and
	// promotes its member), none when refused before the steps are known.
	Steps []string `json:"steps"`
	// Refused is the refusal the rejoin would meet ("" for none): a reset
	// under way, no node state, this node named as the seed, the seed not
	// answering; this node's etcd too old for the seed's cluster (even
	// with force); or, without force, its wipe while the old cluster may
	// still have a quorum. Member is empty for a refusal met before the
	// steps are known.
	Refused string `json:"refused,omitempty"`
}

// RejoinPlanOf is the observation of RejoinEtcd without its locks: the
// steps a rejoin would run, and the refusal it would meet (also returned as
// the error, marked ErrRefused). It changes nothing.
func (n *Node) RejoinPlanOf(ctx context.Context, cp1IP string, force bool) (RejoinPlanReport, error) {
	rep := RejoinPlanReport{Seed: cp1IP, Steps: []string{}}
	if net.ParseIP(cp1IP) == nil {
		err := fmt.Errorf("etcd rejoin: --server %q is not an IP address; nothing was changed", cp1IP)
		rep.Refused = err.Error()
		return rep, Refusal(err)
	}
	if err := n.refuseResetUnderWay("etcd rejoin"); err != nil {
		rep.Refused = err.Error()
		return rep, err
	}
	st, obs, steps, err := n.planRejoinHere(ctx, cp1IP)
	if err != nil {
		// No node state, this node named as the seed, the seed not
		// answering: refused before any step is known.
		rep.Refused = err.Error()
		return rep, Refusal(err)
	}
	rep.Member, rep.SeedClusterID = st.Etcd.Name, obs.SeedClusterID
	for _, s := range steps {
		rep.Steps = append(rep.Steps, string(s))
	}
	if err := n.checkRejoinEtcdVersion(ctx, obs, steps); err != nil {
		rep.Refused = err.Error()
		return rep, Refusal(err)
	}
	if hasStep(steps, rejoinWipe) && !force {
		if err := n.checkOldClusterGone(ctx, st, cp1IP, obs.SeedClusterID); err != nil {
			rep.Refused = err.Error()
			return rep, Refusal(err)
		}
	}
	return rep, nil
}

// RejoinPlan is `stratum etcd rejoin --dry-run`: RejoinPlanOf written to w,
// the steps a rejoin would run and whether its wipe would be refused without
// force. It takes no lock and changes nothing. It returns the refusal the
// rejoin would meet (ErrRefused), so a dry run exits as the rejoin would.
func (n *Node) RejoinPlan(ctx context.Context, w io.Writer, cp1IP string, force bool) error {
	rep, err := n.RejoinPlanOf(ctx, cp1IP, force)
	if rep.Member == "" {
		return err
	}
	fmt.Fprintf(w, "would rejoin %s to the etcd cluster %s at %s: %s\n", rep.Member, rep.SeedClusterID, cp1IP, strings.Join(rep.Steps, ", "))
	switch {
	case rep.Refused == "":
	case errors.Is(err, ErrEtcdVersionSkew):
		fmt.Fprintf(w, "the rejoin would be refused, --force or not: %s\n", rep.Refused)
	default:
		fmt.Fprintf(w, "the wipe would be refused without --force: %s\n", rep.Refused)
	}
	return err
}

// rejoinStep is one step of a rejoin.
type rejoinStep string

const (
	rejoinStop         rejoinStep = "stop"          // stop the local control plane
	rejoinWipe         rejoinStep = "wipe"          // remove the stale etcd data directory
	rejoinMemberRemove rejoinStep = "member-remove" // drop a started member with this peer URL from the seed
	rejoinMemberAdd    rejoinStep = "member-add"    // add this node to the seed as a learner
	rejoinStateSave    rejoinStep = "state-save"    // record the seed's membership in the node state
	rejoinStart        rejoinStep = "start"         // start etcd, promote, start the rest of the control plane
)

// seedMembership is how the seed's cluster knows this node's peer URL.
type seedMembership int

const (
	seedNone      seedMembership = iota // no member has it
	seedUnstarted                       // a learner added but never started
	seedStarted                         // a started member
)

// rejoinObservation is what a rejoin sees before it plans.
type rejoinObservation struct {
	// SeedClusterID is the seed's etcd cluster ID.
	SeedClusterID string
	// Self is how the seed's cluster knows this node's peer URL.
	Self seedMembership
	// LocalClusterID is the cluster ID the local etcd member reports, ""
	// when it does not answer.
	LocalClusterID string
	// StateJoined: the node state records a join of the seed's cluster
	// (state "existing", the seed's cluster ID).
	StateJoined bool
	// DataDirEmpty: the etcd data directory is absent or empty.
	DataDirEmpty bool
	// DataLost: the node state records a member that has served
	// (Etcd.Started), and its data directory holds nothing: a disk lost or
	// replaced. Its member cannot start again on no data.
	DataLost bool
	// Running: some control-plane service runs on this node.
	Running bool
	// SeedMemberIPs are the client hosts of the seed's started members:
	// whose versions a new member of the seed's cluster must fit.
	SeedMemberIPs []string
}

// planRejoin returns the steps a rejoin has left, from what it observes. A
// node whose member the seed knows and whose local data belongs to the
// seed's cluster (its running etcd says so, or its saved state does) only
// needs starting and promoting, unless its data is lost (DataLost). Anything
// else is stale data: stop what runs, remove the data, drop a started member
// of ours from the seed (it cannot be re-added while it is there), add this
// node (an unstarted learner of ours is taken as the add), record it, start.
func planRejoin(o rejoinObservation) []rejoinStep {
	belongs := o.LocalClusterID == o.SeedClusterID || o.LocalClusterID == "" && o.StateJoined
	if o.Self != seedNone && belongs && !o.DataLost {
		return []rejoinStep{rejoinStart}
	}
	var steps []rejoinStep
	if o.Running {
		steps = append(steps, rejoinStop)
	}
	if !o.DataDirEmpty {
		steps = append(steps, rejoinWipe)
	}
	if o.Self == seedStarted {
		steps = append(steps, rejoinMemberRemove)
	}
	return append(steps, rejoinMemberAdd, rejoinStateSave, rejoinStart)
}

// RejoinEtcd is the package-level RejoinEtcd on this node.
//
// It takes the node's maintenance lock, then its etcd-data lock, and holds
// both to the end; a refusal names the holder and changes nothing. It
// observes the seed's membership, the local etcd, the data directory and
// the node state, and plans the remaining steps (planRejoin), so a re-run
// after a crash resumes. Before it wipes data it refuses, unless force, when
// the old cluster this node's data belongs to may still have a quorum: a
// member of it (this node's own or an old peer) that is not in the seed's
// cluster reports a leader, or too many of them do not answer to rule a
// quorum out. The learner's catch-up is reported through w every
// rejoinReportEvery; everything is bounded by ctx.
func (n *Node) RejoinEtcd(ctx context.Context, w io.Writer, cp1IP string, force bool) error {
	h := n.env.Host
	// Refusals first: up to the start checkpoint nothing is changed.
	if net.ParseIP(cp1IP) == nil {
		return Refusal(fmt.Errorf("etcd rejoin: --server %q is not an IP address; nothing was changed", cp1IP))
	}
	release, err := nodelock.AcquireBoth(h, "stratum etcd rejoin", n.lockOptions(ctx)...)
	if err != nil {
		return Refusal(err)
	}
	defer release()
	if err := n.refuseResetUnderWay("etcd rejoin"); err != nil {
		return err
	}
	st, obs, steps, err := n.planRejoinHere(ctx, cp1IP)
	if err != nil {
		return Refusal(stoppedRefusal(ctx, "etcd rejoin", err))
	}
	fmt.Fprintf(w, "rejoining %s to the etcd cluster %s at %s: %s\n", st.Etcd.Name, obs.SeedClusterID, cp1IP, joinSteps(steps))
	if err := n.checkRejoinEtcdVersion(ctx, obs, steps); err != nil {
		return Refusal(stoppedRefusal(ctx, "etcd rejoin", err))
	}
	if hasStep(steps, rejoinWipe) && !force {
		if err := n.checkOldClusterGone(ctx, st, cp1IP, obs.SeedClusterID); err != nil {
			// Questions a Ctrl-C cut short read as members that do not
			// answer: no advice to discard data on the strength of it.
			return Refusal(stoppedRefusal(ctx, "etcd rejoin", err))
		}
	}
	if err := n.checkpoint(ctx, CheckpointRejoinStart); err != nil {
		return err
	}
	earlier := n.dataReplaceUnderWay() // an earlier run's: the data may be half gone
	if hasStep(steps, rejoinStateSave) {
		// From here until the state save, the node state names the old
		// membership while the data goes: `stratum up` must not start it.
		if err := n.beginDataReplace("an etcd rejoin", fmt.Sprintf("the same `stratum etcd rejoin --server %s`", cp1IP), earlier); err != nil {
			return fmt.Errorf("etcd rejoin: %w", err)
		}
	}
	seed := []string{cp1IP}
	for i, s := range steps {
		if err := ctx.Err(); err != nil {
			return n.rejoinStopped(ctx, steps[:i], s, earlier)
		}
		began := time.Now()
		if err := n.rejoinStep(ctx, w, s, st, obs, seed); err != nil {
			return n.rejoinStepFailed(err, s, steps[:i], earlier)
		}
		n.stepDone(string(s), time.Since(began))
	}
	fmt.Fprintf(w, "rejoined: %s is a voter of etcd cluster %s\n", st.Etcd.Name, obs.SeedClusterID)
	return nil
}

// rejoinStepFailed is the error of a rejoin whose step s failed with err,
// the steps ran before it. A failure before the data was touched (the stop
// step's, or the wipe's own stop) ends the data-replacement journal this run
// wrote (nothing for `stratum up` to refuse) and names `stratum up`, which
// starts the control plane again on its data, untouched, once a stop step
// has stopped it.
func (n *Node) rejoinStepFailed(err error, s rejoinStep, ran []rejoinStep, earlier bool) error {
	if s != rejoinStop && !errors.Is(err, errDataUntouched) || earlier {
		return err
	}
	if jerr := n.endDataReplace(); jerr != nil {
		return fmt.Errorf("%w; the data is untouched, but %w", err, jerr)
	}
	switch {
	case s == rejoinStop:
		return fmt.Errorf("%w, or `stratum up` to start it again on its etcd data, untouched", err)
	case slices.Contains(ran, rejoinStop):
		// Stopped by the stop step before: a re-run alone leaves it so
		// until it succeeds.
		return fmt.Errorf("%w; this node's control plane is stopped (this rejoin's stop step ran): `stratum up` starts it again on its etcd data, untouched", err)
	}
	return err
}

// rejoinStopped is the error of a rejoin stopped (Ctrl-C) before step s,
// the steps ran before it. Until the wipe and the membership's change its
// data is untouched: the replacement journal this run wrote goes (it would
// keep `stratum up` from starting the node), and nothing was changed when
// no step ran, or only the stop, which it says.
func (n *Node) rejoinStopped(ctx context.Context, ran []rejoinStep, s rejoinStep, earlier bool) error {
	stopped := fmt.Errorf("etcd rejoin stopped before %s: %w", s, context.Cause(ctx))
	touched := slices.ContainsFunc(ran, func(r rejoinStep) bool { return r != rejoinStop })
	if earlier || touched {
		return fmt.Errorf("%w; re-run the same command to resume", stopped)
	}
	if err := n.endDataReplace(); err != nil {
		return fmt.Errorf("%w; its etcd data is untouched, but %w: re-run the same command", stopped, err)
	}
	if len(ran) == 0 {
		return Refusal(fmt.Errorf("%w; nothing was changed: re-run the same command", stopped))
	}
	return fmt.Errorf("%w; this node's control plane is stopped and its etcd data untouched: re-run the same command to go on, or `stratum up` to start it again as it was", stopped)
}

// errDataUntouched marks a rejoin step's failure that came before the step
// touched the etcd data: the replacement journal is not needed for it.
var errDataUntouched = errors.New("nothing of the etcd data was removed")

// observeRejoin reads what planRejoin plans from.
func (n *Node) observeRejoin(ctx context.Context, st *nodestate.NodeState, cp1IP, self string) (rejoinObservation, error) {
	var o rejoinObservation
	seedStatus, err := n.etcdStatus(ctx, cp1IP)
	if err != nil {
		return o, fmt.Errorf("etcd rejoin: the seed's etcd at %s: %w; nothing was changed: start it (restore it with `stratum snapshot restore`) and re-run", cp1IP, err)
	}
	if seedStatus.Leader == 0 {
		return o, fmt.Errorf("etcd rejoin: the seed's etcd at %s knows no leader; nothing was changed: heal it and re-run", cp1IP)
	}
	o.SeedClusterID = fmt.Sprintf("%x", seedStatus.Header.ClusterId)
	ms, err := n.members(ctx, []string{cp1IP}, "etcd rejoin")
	if err != nil {
		return o, fmt.Errorf("%w; nothing was changed", err)
	}
	o.SeedMemberIPs = startedClientIPs(ms)
	if m := memberByPeerURL(ms, st.Etcd.PeerURL); m != nil {
		o.Self = seedUnstarted
		if started(m) {
			o.Self = seedStarted
		}
	}
	if ls, err := n.etcdStatus(ctx, self); err == nil {
		o.LocalClusterID = fmt.Sprintf("%x", ls.Header.ClusterId)
	}
	o.StateJoined = st.Etcd.InitialClusterState == "existing" && st.Etcd.ClusterID == o.SeedClusterID
	held, err := etcdDataEntries(n.env.Host)
	if err != nil {
		return o, fmt.Errorf("etcd rejoin: read %s: %w; nothing was changed", version.EtcdDataDir, err)
	}
	o.DataDirEmpty = len(held) == 0
	o.DataLost = o.DataDirEmpty && st.Etcd.Started
	for _, s := range controlPlaneServices {
		if ss, err := n.env.Host.ServiceStatus(ctx, s); err == nil && ss.Running {
			o.Running = true
		}
	}
	return o, nil
}

// rejoinVersionRefusal is the rejoin's: its version refusal comes before
// the stop and the wipe.
var rejoinVersionRefusal = versionRefusal{unchanged: "nothing was changed", then: "re-run the rejoin"}

// checkRejoinEtcdVersion refuses, before anything changes, a rejoin whose
// member would start new in the seed's cluster (it is to be added, or was
// added and has not started) on an etcd that cluster's version no longer
// admits: a snapshot restored on a node with a newer etcd makes a cluster of
// that version, and this node's older etcd would exit at its first start,
// after its data was wiped and its learner added (checkEtcdVersionFits).
func (n *Node) checkRejoinEtcdVersion(ctx context.Context, o rejoinObservation, steps []rejoinStep) error {
	if o.Self == seedStarted && !hasStep(steps, rejoinMemberAdd) {
		return nil
	}
	if err := n.checkEtcdVersionFits(ctx, o.SeedMemberIPs, rejoinVersionRefusal); err != nil {
		return fmt.Errorf("etcd rejoin: %w", err)
	}
	return nil
}

// checkOldClusterGone refuses a wipe while the old cluster may still have a
// quorum. The old cluster's members are the peers of this node's recorded
// initial cluster and this node itself; the seed, and any member that now
// answers with the seed's cluster ID, have left it. One that reports a
// leader proves a quorum; members that do not answer could form one, so
// they refuse too once they are a majority of the old cluster.
func (n *Node) checkOldClusterGone(ctx context.Context, st *nodestate.NodeState, cp1IP, seedID string) error {
	self := urlHostOf(st.Etcd.ClientURL)
	old := map[string]bool{self: true}
	for _, ip := range peerIPs(st.Etcd.InitialCluster, st.Etcd.PeerURL) {
		old[ip] = true
	}
	var ips []string
	for ip := range old {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	var leaders, silent []string
	for _, ip := range ips {
		if ip == cp1IP {
			continue
		}
		s, err := n.etcdStatus(ctx, ip)
		switch {
		case err != nil && ip == self && n.etcdStopped(ctx):
			// This node's own etcd, stopped (by a first run of this rejoin
			// that a crash or a failure interrupted): no quorum elsewhere
			// can count on it.
		case err != nil:
			silent = append(silent, ip)
		case fmt.Sprintf("%x", s.Header.ClusterId) == seedID:
		case s.Leader != 0:
			leaders = append(leaders, fmt.Sprintf("%s (cluster %x, leader %x)", ip, s.Header.ClusterId, s.Leader))
		}
	}
	const hint = "nothing was changed: stop etcd on the old cluster's members first, or pass --force to discard this member's data anyway"
	if len(leaders) > 0 {
		return fmt.Errorf("%w: %s still report a leader; %s", ErrOldClusterQuorum, strings.Join(leaders, ", "), hint)
	}
	if len(silent) >= len(ips)/2+1 {
		return fmt.Errorf("%w: %d of the old cluster's %d members (%s) do not answer, enough to hold a quorum elsewhere; %s", ErrOldClusterQuorum, len(silent), len(ips), strings.Join(silent, ", "), hint)
	}
	return nil
}

// etcdStopped reports whether this host's etcd service is known not to run;
// not knowing (the host cannot say) is false.
func (n *Node) etcdStopped(ctx context.Context) bool {
	ss, err := n.env.Host.ServiceStatus(ctx, ServiceEtcd)
	return err == nil && !ss.Running
}

// rejoinStep runs one step of a rejoin (RejoinEtcd's list, in order), each
// followed by its checkpoint.
func (n *Node) rejoinStep(ctx context.Context, w io.Writer, s rejoinStep, st *nodestate.NodeState, obs rejoinObservation, seed []string) error {
	h := n.env.Host
	switch s {
	case rejoinStop:
		if err := n.stopControlPlane(ctx); err != nil {
			return fmt.Errorf("etcd rejoin: %w; the control plane may be stopped in part (`stratum status` says what runs): re-run the same command", err)
		}
		fmt.Fprintf(w, "local control plane stopped\n")
		if err := n.checkpoint(ctx, CheckpointRejoinAfterStop); err != nil {
			return err
		}
	case rejoinWipe:
		// Stopped first, whatever the plan saw: a real supervisor relaunches
		// an etcd that exits, reporting it not running between launches,
		// and one launched now would start on half-removed data.
		if err := n.stopControlPlane(ctx); err != nil {
			return fmt.Errorf("etcd rejoin: %w; the data is untouched (%w): re-run the same command", err, errDataUntouched)
		}
		if err := wipeEtcdData(h); err != nil {
			return fmt.Errorf("etcd rejoin: remove the stale data directory %s: %w; re-run the same command", version.EtcdDataDir, err)
		}
		fmt.Fprintf(w, "stale etcd data %s removed\n", version.EtcdDataDir)
		if err := n.checkpoint(ctx, CheckpointRejoinAfterWipe); err != nil {
			return err
		}
	case rejoinMemberRemove:
		if err := n.MemberRemove(ctx, seed, st.Etcd.PeerURL); err != nil {
			return fmt.Errorf("etcd rejoin: drop this node's stale member from the seed: %w; this node's control plane stays stopped: re-run the same command", err)
		}
		fmt.Fprintf(w, "stale member %s removed from the seed\n", st.Etcd.PeerURL)
		if err := n.checkpoint(ctx, CheckpointRejoinAfterMemberRemove); err != nil {
			return err
		}
	case rejoinMemberAdd:
		ic, err := n.MemberAdd(ctx, seed, st.Etcd.Name, st.Etcd.PeerURL)
		if err != nil {
			return fmt.Errorf("etcd rejoin: %w; re-run the same command", err)
		}
		st.Etcd.InitialCluster = ic
		fmt.Fprintf(w, "added to the seed as a learner (initial cluster %s)\n", ic)
		if err := n.checkpoint(ctx, CheckpointRejoinAfterMemberAdd); err != nil {
			return err
		}
	case rejoinStateSave:
		// The member takes the seed's quota, as a join takes its cluster's:
		// with less, the seed's data could fill it at once.
		if q, ok := n.quotaOf(ctx, seed); ok {
			st.Etcd.QuotaBackendBytes = q
		}
		st.Etcd.InitialClusterState = "existing"
		st.Etcd.ClusterID = obs.SeedClusterID
		st.Etcd.MemberID = ""
		st.Etcd.Started = false // its data is wiped: the first start makes it
		if err := nodestate.Save(h, st); err != nil {
			return fmt.Errorf("etcd rejoin: %w; re-run the same command", err)
		}
		if err := n.endDataReplace(); err != nil {
			return fmt.Errorf("etcd rejoin: the node state records the seed's membership, but %w; re-run the same command", err)
		}
		if err := n.checkpoint(ctx, CheckpointRejoinAfterStateSave); err != nil {
			return err
		}
	case rejoinStart:
		// A re-run whose state save was done (a crash right after it) finds
		// the journal still there.
		if err := n.endDataReplace(); err != nil {
			return fmt.Errorf("etcd rejoin: %w; re-run the same command", err)
		}
		if err := n.startRejoined(ctx, w, seed, st); err != nil {
			return err
		}
	}
	return nil
}

// startRejoined starts the rejoined member, reports its catch-up until it is
// promoted, then starts the rest of the control plane as `stratum up` does.
func (n *Node) startRejoined(ctx context.Context, w io.Writer, seed []string, st *nodestate.NodeState) error {
	if err := n.startEtcd(ctx, st); err != nil {
		return fmt.Errorf("etcd rejoin: %w; the node state records the seed's membership: run `stratum up` or re-run the rejoin", err)
	}
	fmt.Fprintf(w, "etcd started; waiting for the learner to catch up with the seed\n")
	if err := n.checkpoint(ctx, CheckpointRejoinAfterEtcdStart); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- n.PromoteWhenCaughtUp(ctx, seed, st.Etcd.PeerURL) }()
	start := time.Now()
	tick := time.NewTicker(rejoinReportEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("etcd rejoin: %w; re-run the same command (or `stratum up`) to promote it", err)
			}
			fmt.Fprintf(w, "promoted to a voter after %s\n", time.Since(start).Round(time.Second))
			if _, err := n.StartControlPlane(ctx); err != nil {
				return fmt.Errorf("etcd rejoin: member promoted, but the control plane did not start: %w; run `stratum up`", err)
			}
			return nil
		case <-tick.C:
			fmt.Fprintf(w, "still waiting for %s to catch up (%s)\n", st.Etcd.Name, time.Since(start).Round(time.Second))
		}
	}
}

func hasStep(steps []rejoinStep, s rejoinStep) bool {
	for _, x := range steps {
		if x == s {
			return true
		}
	}
	return false
}

func joinSteps(steps []rejoinStep) string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}
