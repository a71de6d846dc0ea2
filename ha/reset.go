package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// Checkpoints of a reset (ResetControlPlane), in the order a reset reaches
// them. A crash at any of them leaves a node that a re-run of the same
// command converges: it plans the remaining steps from what it observes.
const (
	// CheckpointResetStart: refusals passed, locks held, the reset journal
	// written; nothing else changed.
	CheckpointResetStart = "reset-start"
	// CheckpointResetAfterStopVIP: the VIP candidate and the operator are
	// stopped, so the VIP has moved to another control plane.
	CheckpointResetAfterStopVIP = "reset-after-stop-vip"
	// CheckpointResetAfterStopAPIServer: the local apiserver is stopped.
	CheckpointResetAfterStopAPIServer = "reset-after-stop-apiserver"
	// CheckpointResetAfterMemberRemove: this node's etcd member is gone from
	// the cluster; its etcd may still run.
	CheckpointResetAfterMemberRemove = "reset-after-member-remove"
	// CheckpointResetAfterStopEtcd: the local etcd is stopped.
	CheckpointResetAfterStopEtcd = "reset-after-stop-etcd"
	// CheckpointResetAfterWipe: the control plane's files are gone but the
	// reset journal.
	CheckpointResetAfterWipe = "reset-after-wipe"
)

// ResetCheckpoints are the reset's checkpoints in order.
var ResetCheckpoints = []string{
	CheckpointResetStart, CheckpointResetAfterStopVIP, CheckpointResetAfterStopAPIServer,
	CheckpointResetAfterMemberRemove, CheckpointResetAfterStopEtcd, CheckpointResetAfterWipe,
}

// ErrResetUnderWay: a reset of this node began and has not finished. `stratum
// up` and a join refuse while its journal is there: the node state may name a
// member the reset already removed, and etcd started from it would exit.
var ErrResetUnderWay = errors.New("a reset of this node is under way")

// resetJournalPath records a reset from its first change to its last: its
// presence alone is the record, its contents say which member it removes.
var resetJournalPath = path.Join(version.StateDir, "reset-intent.json")

// ResetJournalPath is where a reset under way is recorded.
func ResetJournalPath() string { return resetJournalPath }

type resetJournal struct {
	Name    string `json:"name,omitempty"`
	PeerURL string `json:"peerURL,omitempty"`
	// Asked are the client IPs of the cluster's members when the reset
	// began: the node state's initial cluster is the membership at the
	// join (or restore), so a re-run whose own etcd is down (a crash)
	// finds the cluster through these.
	Asked   []string  `json:"asked,omitempty"`
	Started time.Time `json:"started"`
	// Removed records that the member-remove step finished: a re-run that
	// finds no member answering knows the member is gone, not unknown.
	Removed bool `json:"removed,omitempty"`
}

// resetStep is one step of a reset, named as a plan prints it.
type resetStep string

const (
	resetStopVIP       resetStep = "stop-vip"
	resetStopAPIServer resetStep = "stop-apiserver"
	// resetStartEtcd starts this node's etcd again, before the rest is
	// planned anew: a reset that crashed before its member-add left the
	// other members without a quorum when this node's vote is part of it
	// (two voters), so none answers until this node's etcd is back.
	resetStartEtcd    resetStep = "start-etcd"
	resetMemberRemove resetStep = "member-remove"
	resetStopEtcd     resetStep = "stop-etcd"
	resetWipe         resetStep = "wipe"
)

// ResetPlanReport is what a reset would do on this node, as ResetPlanOf
// observes it. The JSON names are stable (docs/cli.md, `reset --dry-run -o
// json`).
type ResetPlanReport struct {
	// Member is this node's etcd member name and PeerURL its peer URL, from
	// the node state or a join's intent journal; empty when neither records
	// one.
	Member  string `json:"member,omitempty"`
	PeerURL string `json:"peerURL,omitempty"`
	// Role is the member's role in the cluster: "voter", "learner", or
	// "absent" (not a member), "unknown" when no member answered.
	Role string `json:"role,omitempty"`
	// Steps are the steps a reset would run, in order (stop-vip,
	// stop-apiserver, member-remove, stop-etcd, wipe); none when nothing of
	// a control plane is left here.
	Steps []string `json:"steps"`
	// VotersAfter, HealthyAfter and QuorumAfter describe the cluster
	// without this node's voter; QuorumAfter is 0 when no voter is left.
	VotersAfter  int `json:"votersAfter"`
	HealthyAfter int `json:"healthyAfter"`
	QuorumAfter  int `json:"quorumAfter"`
	// Refused is why the reset would be refused without force ("" for
	// not): the remaining voters under quorum, the cluster's last voter, or
	// no member of the cluster answering.
	Refused string `json:"refused,omitempty"`
	// Unfinished: an earlier run of this reset left it unfinished (its
	// journal is there): the services it stopped stay stopped, and `stratum
	// up` refuses until a reset finishes, so a refused re-run changed
	// nothing but leaves the node short of what it was before the first.
	Unfinished bool `json:"unfinished,omitempty"`
	// Remaining is what the operator still has to do elsewhere after a
	// forced reset that could not remove the member ("" for nothing).
	Remaining string `json:"remaining,omitempty"`
}

// resetObservation is what a reset plans from.
type resetObservation struct {
	name, peerURL string
	// asked are the etcd client IPs the member list and the removal go
	// through: the other members first, this node's own last.
	asked []string
	// publishedVia is the apiserver endpoint the members the cluster
	// published for joiners were read through, when none of those this
	// node records answered ("" when they were not read); publishedErr is
	// why they could not be.
	publishedVia string
	publishedErr error
	// publishedUnanswered is why the published members read did not
	// answer with this node's cluster's member list.
	publishedUnanswered error
	// addressGone is why this node's etcd cannot start here (its recorded
	// address is no longer this host's), nil when it can or is unknown.
	addressGone error
	// role: "voter", "learner", "absent" or "unknown".
	role                       string
	votersAfter, healthyAfter  int
	running                    map[string]bool
	filesLeft, journalUnderWay bool
	// stateSaved: the node state records the member (not only a join's
	// journal), so this node's etcd can be started from it.
	stateSaved bool
	// removed: the reset journal records the member removed.
	removed bool
	// mayStartEtcd: a plan may start this node's etcd again (not forced).
	mayStartEtcd bool
	started      time.Time
	// journalUnreadable: the reset journal is there but cannot be parsed,
	// so whether this reset removed the member is unknown.
	journalUnreadable error
	// unreadable is why a forced reset could not read the record of this
	// node's member (a malformed node state, a damaged join journal): it
	// wipes without removing the member, and names what to look for.
	unreadable error
	hostName   string
}

// ResetControlPlane is `stratum reset`: it takes this control plane out of
// its cluster and removes what made it one, so the machine can be retired or
// joined again. Steps, each skipped when already done (so a re-run after a
// crash resumes): the VIP candidate and the operator stop (the VIP moves to
// another control plane), the apiserver stops, this node's etcd member is
// removed from the cluster through the other members (leadership moved away
// first), etcd stops, and the files go: the node state first (so a reboot
// never restarts a removed member), the join journal, the etcd data, the
// certificates, keys and kubeconfigs, the reset journal last.
//
// Refusals first, nothing changed: the node's locks; then, unless force, a
// removal that would leave the remaining voters' healthy members under
// quorum, this node's member being the cluster's last voter (a reset there
// destroys the cluster), or no member answering (the member could not be
// removed). force wipes anyway; a member it could not remove is named, with
// the command to remove it from a running control plane. The plan and each
// step are reported through w.
func (n *Node) ResetControlPlane(ctx context.Context, w io.Writer, force bool) error {
	release, err := nodelock.AcquireBoth(n.env.Host, "stratum reset", n.lockOptions(ctx)...)
	if err != nil {
		return Refusal(err)
	}
	defer release()
	obs, err := n.observeReset(ctx, force)
	if err != nil {
		return Refusal(stoppedRefusal(ctx, "reset", err))
	}
	obs.mayStartEtcd = !force // forced, the reset wipes without the member's removal
	rep := planReset(obs)
	// refusedAfter is a refusal met after this run started this node's
	// etcd again: no longer "nothing was changed" (exit 1, not 3).
	refusedAfter := Refusal
	if slices.Contains(rep.Steps, string(resetStartEtcd)) {
		if obs, err = n.restartEtcdForReset(ctx, w, obs); err != nil {
			return err
		}
		refusedAfter = startedEtcdForReset
		obs.mayStartEtcd = false
		rep = planReset(obs)
	}
	if len(rep.Steps) == 0 {
		fmt.Fprintf(w, "nothing of a control plane is left on this node; nothing to reset\n")
		return nil
	}
	fmt.Fprintf(w, "resetting %s: %s\n", describeMember(rep), strings.Join(rep.Steps, ", "))
	if rep.Refused != "" && !force {
		return refusedAfter(errors.New(rep.refusalText()))
	}
	if obs.started.IsZero() {
		obs.started = n.env.Host.Now().UTC()
	}
	if err := n.writeResetJournal(obs); err != nil {
		if !obs.journalUnderWay {
			// A write that failed after its rename (the directory's fsync)
			// leaves the file, which would refuse every later up or join.
			if rerr := n.env.Host.Remove(resetJournalPath); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				return refusedAfter(fmt.Errorf("%w; the journal could not be removed either (%v): remove %s by hand before the next `stratum up` or join", err, rerr, resetJournalPath))
			}
		}
		return refusedAfter(err)
	}
	if err := n.checkpoint(ctx, CheckpointResetStart); err != nil {
		return err
	}
	for _, s := range rep.Steps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reset stopped before %s: %w; re-run `stratum reset` to finish", s, err)
		}
		began := time.Now()
		if err := n.resetStep(ctx, w, resetStep(s), obs); err != nil {
			return err
		}
		n.stepDone(s, time.Since(began))
	}
	if rep.Remaining != "" {
		fmt.Fprintf(w, "reset done, but %s\n", rep.Remaining)
		return nil
	}
	fmt.Fprintf(w, "reset done: this node is no longer a control plane\n")
	return nil
}

// restartEtcdForReset starts this node's etcd again, for a reset that a
// crash interrupted before its member-remove while no other member answers
// (observed in obs), and observes the node anew. The node is still a member
// of the cluster (its node state is there, which the wipe removes first), so
// its etcd rejoins the others and gives them their quorum back; the reset
// then removes it through them. A start that fails leaves the reset
// refused as before, naming why.
func (n *Node) restartEtcdForReset(ctx context.Context, w io.Writer, obs resetObservation) (resetObservation, error) {
	// A restore or rejoin interrupted mid-copy left data etcd must not
	// start on. What finishes them refuses while this reset's journal is
	// there, so the way on is the other members or --force.
	if _, err := n.env.Host.Stat(dataReplacePath); !errors.Is(err, fs.ErrNotExist) {
		why := fmt.Sprintf("a snapshot restore or etcd rejoin began replacing its data and did not finish (%s), so etcd would start on partial data", dataReplacePath)
		if err != nil {
			why = fmt.Sprintf("whether a restore or rejoin left its data half replaced is unknown (%v)", err)
		}
		return obs, Refusal(fmt.Errorf("reset: this node's member %s cannot be removed: no etcd member answered (asked %s), and this node's etcd is not started again: %s; nothing more was changed: bring the other members back and re-run the reset, or `stratum reset --force` (which wipes this node, leaving its member in the cluster)",
			memberRef(obs.name, obs.peerURL), strings.Join(obs.asked, ", "), why))
	}
	fmt.Fprintf(w, "no etcd member answered (asked %s) and this node's etcd is not running (the reset was interrupted before its member-remove): starting it, so the cluster has its quorum back and the reset can remove it\n", strings.Join(obs.asked, ", "))
	st, err := nodestate.Load(n.env.Host)
	if err == nil {
		err = n.startEtcd(ctx, st)
	}
	if err != nil {
		return obs, Refusal(fmt.Errorf("reset: this node's member %s cannot be removed: no etcd member answered (asked %s), and this node's etcd did not start: %w; nothing more was changed: bring the other members back and re-run the reset (--force resets anyway, leaving its member in the cluster)",
			memberRef(obs.name, obs.peerURL), strings.Join(obs.asked, ", "), err))
	}
	fmt.Fprintf(w, "etcd started\n")
	next, err := n.observeReset(ctx, false)
	if err != nil {
		if ctx.Err() != nil {
			return obs, startedEtcdForReset(fmt.Errorf("reset stopped once it had started this node's etcd to ask the members: %w", context.Cause(ctx)))
		}
		return obs, startedEtcdForReset(err)
	}
	return next, nil
}

// startedEtcdForReset is err, met after restartEtcdForReset started this
// node's etcd, marked as the change that start is (Midway: exit 1, err kept
// in the chain): the member runs again, which it did not after the earlier
// run was interrupted (a reboot, a crash or a stopped supervisor: a reset
// stops etcd only once it has recorded the member's removal). A refusal's
// "nothing was changed" in err is qualified, not edited out.
func startedEtcdForReset(err error) error {
	return Midway(fmt.Errorf("%w; except that this reset had started this node's etcd again (it was not running after the earlier run was interrupted), which changed nothing else: re-run `stratum reset` once that is mended (`stratum status` says whether etcd still runs)", err))
}

// ResetPlanOf is the observation of ResetControlPlane without its locks:
// the steps a reset would run (forced or not: a forced one does not start
// this node's etcd again) and the refusal it would meet without force. It
// changes nothing.
func (n *Node) ResetPlanOf(ctx context.Context, force bool) (ResetPlanReport, error) {
	obs, err := n.observeReset(ctx, force)
	if err != nil {
		return ResetPlanReport{Steps: []string{}}, Refusal(err)
	}
	obs.mayStartEtcd = !force
	return planReset(obs), nil
}

// RefusedError is the reset's refusal of rep (an ErrRefused), nil when rep
// meets none: what `stratum reset --dry-run` exits 3 with, in the words of
// the reset itself.
func (rep ResetPlanReport) RefusedError() error {
	if rep.Refused == "" {
		return nil
	}
	return Refusal(errors.New(rep.refusalText()))
}

// refusalText says why the reset is refused, that this run changed nothing,
// and, after an earlier run left it unfinished, that the node is not as it
// was before that run: its stops stand.
func (rep ResetPlanReport) refusalText() string {
	unfinished := ""
	if rep.Unfinished {
		unfinished = fmt.Sprintf(" by this run; an earlier run of this reset left it unfinished (%s): the services it stopped stay stopped, and `stratum up` refuses until the reset finishes", resetJournalPath)
	}
	return fmt.Sprintf("reset refused: %s; nothing was changed%s (--force resets anyway)", rep.Refused, unfinished)
}

func describeMember(rep ResetPlanReport) string {
	if rep.Member == "" && rep.PeerURL == "" {
		return "this node (no etcd member recorded)"
	}
	return fmt.Sprintf("etcd member %s (%s, %s)", rep.Member, rep.PeerURL, rep.Role)
}

// QuorumOf is the number of voters an etcd cluster of voters needs to
// commit, a majority; 0 when there are none, which have no quorum to keep.
func QuorumOf(voters int) int {
	if voters <= 0 {
		return 0
	}
	return voters/2 + 1
}

// planReset decides the steps and the refusal from an observation.
func planReset(o resetObservation) ResetPlanReport {
	rep := ResetPlanReport{Member: o.name, PeerURL: o.peerURL, Role: o.role, Steps: []string{},
		VotersAfter: o.votersAfter, HealthyAfter: o.healthyAfter, QuorumAfter: QuorumOf(o.votersAfter), Unfinished: o.journalUnderWay}
	add := func(s resetStep) { rep.Steps = append(rep.Steps, string(s)) }
	if o.running[ServiceVIP] || o.running[serviceOperator] {
		add(resetStopVIP)
	}
	if o.running[ServiceAPIServer] {
		add(resetStopAPIServer)
	}
	removeHint := fmt.Sprintf("remove its etcd member from a running control plane: `stratum etcd member remove %s`", memberRef(o.name, o.peerURL))
	if o.unreadable != nil {
		rep.Remaining = fmt.Sprintf("this node's record of its etcd member could not be read (%v): if it was a member, remove it from a running control plane: `stratum etcd members` lists them (this node's is likely named %s), then `stratum etcd member remove NAME`", o.unreadable, o.hostName)
	}
	switch {
	case o.role == "unknown" && o.journalUnderWay && o.journalUnreadable == nil && o.stateSaved && !o.removed && o.mayStartEtcd && !o.running[ServiceEtcd]:
		// A crash stopped this node's etcd mid-reset, before the member was
		// removed (its node state is there): the others may lack a quorum
		// without it. Started again, the reset plans the rest anew; this is
		// what that plan usually is.
		add(resetStartEtcd)
		add(resetMemberRemove)
		add(resetStopEtcd)
		add(resetWipe)
		return rep
	case o.role == "unknown":
		rep.Refused = fmt.Sprintf("no etcd member answered (asked %s%s), so this node's member %s cannot be removed", strings.Join(o.asked, ", "), o.publishedNote(), memberRef(o.name, o.peerURL))
		switch {
		case o.journalUnreadable != nil:
			rep.Refused += fmt.Sprintf("; %v, so whether this reset already removed the member is unknown and its etcd is not started again: bring those members back and re-run the reset (--force wipes this node; then check `stratum etcd members` on a running control plane)", o.journalUnreadable)
		case o.journalUnderWay:
			rep.Refused += ": bring those members back and re-run the reset"
		case !o.running[ServiceEtcd] && o.addressGone != nil:
			rep.Refused += fmt.Sprintf(": this node's etcd is not running and cannot start here (%v), so `stratum up` cannot help: bring those members (or the apiserver the published ones are read through) back and re-run the reset", o.addressGone)
		case !o.running[ServiceEtcd] && o.stateSaved:
			rep.Refused += ": this node's etcd is not running; bring those members back and re-run the reset, or start it (`stratum up`) so the reset finds the cluster through it"
		default:
			rep.Refused += ": bring those members back and re-run the reset"
		}
		rep.Remaining = removeHint
	case o.role == "voter" && o.votersAfter == 0:
		rep.Refused = fmt.Sprintf("this node's member %s is the cluster's last voter: a reset removes its data, and the cluster with it", memberRef(o.name, o.peerURL))
	case o.role == "voter" && o.healthyAfter < rep.QuorumAfter:
		rep.Refused = fmt.Sprintf("without this node %d of the %d remaining voters are healthy, under the quorum of %d: the cluster would stop accepting writes", o.healthyAfter, o.votersAfter, rep.QuorumAfter)
		add(resetMemberRemove)
	case o.role == "voter" || o.role == "learner":
		add(resetMemberRemove)
	}
	if o.running[ServiceEtcd] {
		add(resetStopEtcd)
	}
	if o.filesLeft || o.journalUnderWay {
		add(resetWipe)
	}
	return rep
}

// addressGone is why this node's etcd cannot start here: ip, the node IP its
// node state records, is not an address of this host (a machine
// re-addressed). It is nil when ip is one, or when that is unknown.
func addressGone(h host.Host, ip string) error {
	if ip == "" {
		return nil
	}
	if err := nodeIPGone(h, ip); err != nil {
		return fmt.Errorf("the node IP %s its node state records: %w", ip, err)
	}
	return nil
}

// publishedNote says, for a refusal naming the members asked, whether the
// members the cluster published were among them or why they were not.
func (o resetObservation) publishedNote() string {
	switch {
	case o.publishedVia == "":
		return ""
	case o.publishedErr != nil:
		return fmt.Sprintf("; the members the cluster published for joiners could not be read through %s: %v", o.publishedVia, o.publishedErr)
	case o.publishedUnanswered != nil:
		return fmt.Sprintf(", with the members the cluster published for joiners, read through %s, which gave no member list of this node's cluster: %v", o.publishedVia, o.publishedUnanswered)
	}
	return fmt.Sprintf(", with the members the cluster published for joiners, read through %s", o.publishedVia)
}

func memberRef(name, peerURL string) string {
	if name != "" {
		return name
	}
	return peerURL
}

// refuseWipingUnknownData refuses a forced reset of a node whose node state
// is malformed (why) while it holds etcd data: without the record nothing
// says whether that data is also on other members, and on a single control
// plane it is the cluster's only copy, which a wipe would destroy. The operator
// moves it away (or removes it, knowing), then resets.
func refuseWipingUnknownData(h host.Files, why error) error {
	entries, err := etcdDataEntries(h)
	switch {
	case err == nil && len(entries) == 0:
		return nil
	case err != nil:
		return fmt.Errorf("reset: %v, and %s cannot be read (%w); nothing was changed", why, version.EtcdDataDir, err)
	}
	return fmt.Errorf("reset --force refused: %v, so whether the etcd data in %s is also on other members is unknown (on a single control plane it is the cluster's only copy); nothing was changed: stop this node's stratum, move that directory's contents away (mkdir /root/etcd-data.saved && mv %s/* /root/etcd-data.saved/), then run `stratum reset --force` again", why, version.EtcdDataDir, version.EtcdDataDir)
}

// observeReset reads what planReset plans from. A node state or a join's
// journal that cannot be read is an error: the member it records would be
// left behind. Forced, one that is damaged (not a record at all: no command
// could read the member from it) is noted instead, and the node is planned
// as one that records no member, for a wipe that names what to remove.
// The members it asks are those the node state or journals record and,
// when none of them answers, those the cluster published for joiners
// (publishedPeers): a cluster's first control plane records only itself.
func (n *Node) observeReset(ctx context.Context, force bool) (resetObservation, error) {
	h := n.env.Host
	o := resetObservation{running: map[string]bool{}, role: "absent", hostName: h.Name()}
	var own string
	recorded := true // the node state or a join's journal records the member
	st, err := nodestate.Load(h)
	switch {
	case err == nil:
		o.name, o.peerURL, o.stateSaved = st.Etcd.Name, st.Etcd.PeerURL, true
		own = urlHostOf(st.Etcd.ClientURL)
		o.asked = peerIPs(st.Etcd.InitialCluster, st.Etcd.PeerURL)
		o.addressGone = addressGone(h, st.NodeIP)
	case errors.Is(err, nodestate.ErrNoState):
		in, ierr := n.readJoinIntent()
		switch {
		case ierr == nil:
			o.name, o.peerURL = in.Name, in.PeerURL
			for _, ep := range in.Endpoints {
				if ip := urlHostOf(ep); ip != "" {
					o.asked = append(o.asked, ip)
				}
			}
		case errors.Is(ierr, errNoIntent):
			recorded = false
		case force && errors.Is(ierr, errIntentDamaged):
			recorded, o.unreadable = false, ierr
		default:
			return o, fmt.Errorf("reset: %w", ierr)
		}
	case force && errors.Is(err, nodestate.ErrMalformed):
		recorded, o.unreadable = false, err
	default:
		return o, fmt.Errorf("reset: %w; nothing was changed", err)
	}
	// A damaged join journal (no node state) is a join's, whose data
	// (a learner's) the cluster has elsewhere; a malformed node state may
	// be a single control plane's, whose data is the only copy.
	if o.unreadable != nil && errors.Is(o.unreadable, nodestate.ErrMalformed) {
		if err := refuseWipingUnknownData(h, o.unreadable); err != nil {
			return o, err
		}
	}
	if data, err := h.ReadFile(resetJournalPath); err == nil {
		o.journalUnderWay = true
		var j resetJournal
		if jerr := json.Unmarshal(data, &j); jerr != nil {
			// Whether this reset removed the member is unknown: never
			// start that member again on the chance it was not.
			o.journalUnreadable = fmt.Errorf("the reset journal %s cannot be parsed (%v)", resetJournalPath, jerr)
			n.log.Warn("reset journal unreadable: whether the member was removed is unknown", "err", jerr)
		} else {
			o.removed, o.started = j.Removed, j.Started
			if o.peerURL == "" {
				o.name, o.peerURL = j.Name, j.PeerURL
			}
			for _, ip := range j.Asked {
				if !slices.Contains(o.asked, ip) {
					o.asked = append(o.asked, ip)
				}
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return o, fmt.Errorf("reset: read %s: %w; nothing was changed", resetJournalPath, err)
	}
	if own == "" && o.peerURL != "" {
		own = urlHostOf(o.peerURL)
	}
	if own != "" {
		o.asked = append(slices.DeleteFunc(o.asked, func(ip string) bool { return ip == own }), own)
	}
	for _, s := range controlPlaneServices {
		if ss, err := h.ServiceStatus(ctx, s); err == nil && ss.Running {
			o.running[s] = true
		}
	}
	left, err := controlPlaneFilesLeft(h)
	if err != nil {
		return o, fmt.Errorf("reset: %w; nothing was changed", err)
	}
	o.filesLeft = len(left) > 0
	// A reset journal without the node state or a join's journal means a
	// wipe began, which the wipe removes first; the member's steps ran
	// before it, and the certificates etcd would be asked with may be gone.
	if o.peerURL == "" || !recorded {
		return o, nil
	}
	ms, err := n.members(ctx, o.asked, "reset")
	if err != nil && !o.removed && st != nil {
		// The members this node records did not answer: on a cluster's
		// first control plane, or a restore's seed, its initial cluster
		// names only itself, and its etcd is stopped. The members the
		// cluster published for joiners are asked too, taking only an
		// answer of the cluster the node state records (a restore's seed
		// records its new cluster, and the published list may be the old
		// one's, which still holds this node's peer URL as a member).
		if added := n.publishedPeers(ctx, st.Server, own, &o); len(added) > 0 {
			ms, err = n.membersOf(ctx, added, "reset", st.Etcd.ClusterID)
			o.publishedUnanswered = err
		}
	}
	if err != nil && ctx.Err() != nil {
		// Its questions were cut short, not unanswered: not "none
		// answered", whose reset starts this node's etcd to ask again and
		// then advises --force.
		return o, stoppedRefusal(ctx, "reset", err)
	}
	if err != nil {
		o.role = "unknown"
		if o.removed {
			o.role = "absent" // this reset removed it; none answering changes nothing
		}
		return o, nil
	}
	// The removal goes through the other started members first: this
	// node's own stops serving the moment it applies its removal.
	asked := []string{}
	for _, m := range ms {
		if ip := startedClientIP(m); ip != "" && !slices.Contains(m.PeerURLs, o.peerURL) {
			asked = append(asked, ip)
		}
	}
	o.asked = append(asked, own)
	self := memberByPeerURL(ms, o.peerURL)
	switch {
	case self == nil:
		return o, nil
	case self.IsLearner:
		o.role = "learner"
	default:
		o.role = "voter"
	}
	o.votersAfter, o.healthyAfter = n.remainingVoters(ctx, ms, self)
	if ctx.Err() != nil {
		return o, stoppedRefusal(ctx, "reset", ctx.Err())
	}
	return o, nil
}

// publishedPeers reads the etcd members the cluster published for joiners
// through server (the node state's apiserver endpoint) and puts the hosts
// of those not in o.asked at its front (this node's own, own, stays last),
// returning them. A list that cannot be read is noted in o for the refusal
// that may follow, never an error: the reset goes on with what it has.
func (n *Node) publishedPeers(ctx context.Context, server, own string, o *resetObservation) []string {
	o.publishedVia = server
	if server == "" {
		o.publishedVia = "the admin kubeconfig's server"
	}
	urls, err := n.readPublishedEtcdURLs(ctx, server)
	if err != nil {
		o.publishedErr = err
		n.log.Warn("the members the cluster published for joiners could not be read: the reset goes on with the members this node records", "err", err)
		return nil
	}
	var added []string
	for _, u := range urls {
		if ip := urlHost(u); ip != "" && ip != own && !slices.Contains(o.asked, ip) && !slices.Contains(added, ip) {
			added = append(added, ip)
		}
	}
	o.asked = append(slices.Clone(added), o.asked...)
	return added
}

// remainingVoters counts the voters other than self, and those of them that
// answer with a leader and no alarm.
func (n *Node) remainingVoters(ctx context.Context, ms []*etcdserverpb.Member, self *etcdserverpb.Member) (voters, healthy int) {
	for _, m := range ms {
		if m.ID == self.ID || m.IsLearner {
			continue
		}
		voters++
		ip := startedClientIP(m)
		if ip == "" {
			continue
		}
		if st := n.EtcdMemberStatus(ctx, ip); st.Err == nil && st.Leader != 0 && len(st.Alarms) == 0 {
			healthy++
		}
	}
	return voters, healthy
}

// isBinDir reports whether p, an entry of version.StateDir, is or holds a
// directory of control-plane binaries, which a reset keeps: the default one,
// or any entry holding etcd or kube-apiserver within binDirDepth levels (the
// --bin-dir `stratum install` wrote into the unit, a release staged for an
// upgrade, /var/lib/stratum/releases/v2), which a join or a rejoin on this
// machine needs again. The etcd data directory never is one; a directory
// reached through a link is not searched.
func isBinDir(h host.Files, p string) bool {
	if p == controlplane.DefaultBinDir {
		return true
	}
	if p == version.EtcdDataDir || path.Dir(p) != version.StateDir {
		return false
	}
	return holdsBinary(h, p, binDirDepth)
}

// binDirDepth is how deep below a state directory entry isBinDir looks.
const binDirDepth = 3

// holdsBinary reports whether dir, or a directory below it within depth
// levels (links to directories not followed), holds a file named etcd or
// kube-apiserver.
func holdsBinary(h host.Files, dir string, depth int) bool {
	entries, err := h.ReadDir(dir)
	if err != nil || depth <= 0 {
		return false
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if holdsBinary(h, p, depth-1) {
				return true
			}
		case e.Name() == controlplane.EtcdBinary || e.Name() == controlplane.APIServerBinary:
			if fi, err := h.Stat(p); err == nil && !fi.IsDir() {
				return true
			}
		}
	}
	return false
}

// keptBinDirs are the entries of version.StateDir a reset keeps as
// directories of binaries (isBinDir).
func keptBinDirs(h host.Files) []string {
	kept := []string{controlplane.DefaultBinDir}
	entries, err := h.ReadDir(version.StateDir)
	if err != nil {
		return kept
	}
	for _, e := range entries {
		if p := path.Join(version.StateDir, e.Name()); p != controlplane.DefaultBinDir && isBinDir(h, p) {
			kept = append(kept, p)
		}
	}
	return kept
}

// controlPlaneFilesLeft are the entries of the state and configuration
// directories a reset removes: all but the reset journal and the directories
// of control-plane binaries (isBinDir), which a join on this machine needs
// again. The etcd
// data directory is one while it holds data: emptied, it may be a mount point
// or a link, which stay.
func controlPlaneFilesLeft(h host.Files) ([]string, error) {
	var left []string
	for _, dir := range []string{version.StateDir, version.K8sConfDir} {
		entries, err := h.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			if p == resetJournalPath || isBinDir(h, p) {
				continue
			}
			if p == version.EtcdDataDir {
				// A mount point or a link stays, emptied: only data
				// in it is left to remove.
				held, err := etcdDataEntries(h)
				if err != nil {
					return nil, fmt.Errorf("read %s: %w", p, err)
				}
				if len(held) == 0 {
					continue
				}
			}
			left = append(left, p)
		}
	}
	return left, nil
}

// refuseResetUnderWay refuses, naming the journal, an operation that would
// start or make a control plane on a node whose reset has not finished.
func (n *Node) refuseResetUnderWay(op string) error {
	_, err := n.env.Host.Stat(resetJournalPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return Refusal(fmt.Errorf("%s: check the reset journal %s: %w; nothing was changed", op, resetJournalPath, err))
	}
	return Refusal(fmt.Errorf("%s refused: %w (%s): its etcd member may be removed already; nothing was changed: run `stratum reset` to finish it first", op, ErrResetUnderWay, resetJournalPath))
}

func (n *Node) writeResetJournal(o resetObservation) error {
	started := o.started
	if started.IsZero() {
		started = n.env.Host.Now().UTC()
	}
	data, err := json.Marshal(resetJournal{Name: o.name, PeerURL: o.peerURL, Asked: o.asked, Started: started, Removed: o.removed})
	if err != nil {
		return err
	}
	if err := n.env.Host.WriteFile(resetJournalPath, data, 0o600); err != nil {
		return fmt.Errorf("reset: write the reset journal %s: %w; nothing was changed", resetJournalPath, err)
	}
	return nil
}

// resetStops are the reset's steps that stop services: which, what the
// step reports, and the checkpoint after it.
var resetStops = map[resetStep]struct {
	services   []string
	what       string
	checkpoint string
}{
	resetStopVIP:       {[]string{ServiceVIP, serviceOperator}, "VIP candidate and operator", CheckpointResetAfterStopVIP},
	resetStopAPIServer: {[]string{ServiceAPIServer}, "kube-apiserver", CheckpointResetAfterStopAPIServer},
	resetStopEtcd:      {[]string{ServiceEtcd}, "etcd", CheckpointResetAfterStopEtcd},
}

// resetStep runs one step of a reset, followed by its checkpoint.
func (n *Node) resetStep(ctx context.Context, w io.Writer, s resetStep, o resetObservation) error {
	h := n.env.Host
	const again = "re-run `stratum reset` to finish"
	if stop, ok := resetStops[s]; ok {
		for _, svc := range stop.services {
			if err := n.stopService(ctx, svc); err != nil {
				return fmt.Errorf("reset: %w; %s", err, again)
			}
		}
		fmt.Fprintf(w, "%s stopped\n", stop.what)
		return n.checkpoint(ctx, stop.checkpoint)
	}
	switch s {
	case resetMemberRemove:
		n.moveLeaderAway(ctx, o)
		if err := n.MemberRemove(ctx, o.asked, o.peerURL); err != nil {
			return fmt.Errorf("reset: remove this node's etcd member: %w; %s", err, again)
		}
		fmt.Fprintf(w, "etcd member %s removed from the cluster\n", memberRef(o.name, o.peerURL))
		o.removed = true
		if err := n.writeResetJournal(o); err != nil {
			return fmt.Errorf("reset: the member is removed, but %w; %s", err, again)
		}
		n.publishRemaining(ctx, o)
		return n.checkpoint(ctx, CheckpointResetAfterMemberRemove)
	case resetWipe:
		// Every service stopped first, whatever its status said: a real
		// host's supervisor keeps relaunching a service that exits (a
		// removed member's etcd, crash-looping) and reports it not
		// running between two launches, so the plan may have no stop for
		// it, and a launch during the wipe would run on half-removed data.
		if err := n.stopControlPlane(ctx); err != nil {
			return fmt.Errorf("reset: %w; %s", err, again)
		}
		// The node state first: once it is gone nothing restarts the
		// removed member. The reset journal last: until then `up` and a
		// join refuse.
		left, err := controlPlaneFilesLeft(h)
		if err != nil {
			return fmt.Errorf("reset: %w; %s", err, again)
		}
		// The firewall's trust of the pod range, while the node state
		// still names it: a machine no longer a control plane keeps none.
		// A failure is said, not the reset's: the rule admits only the
		// pod range, which the machine no longer routes.
		if st, err := nodestate.Load(h); err == nil && st.PodCIDR != "" {
			if err := host.UntrustPodCIDRs(h, st.PodCIDR); err != nil {
				n.log.Warn("the firewall may still trust the pod range", "podCIDR", st.PodCIDR, "err", err)
				fmt.Fprintf(w, "warning: the firewall may still trust the pod range %s: %v; delete the INPUT rule commented \"stratum\" by hand (`iptables -L INPUT --line-numbers`, or ip6tables for an IPv6 range, shows it)\n", st.PodCIDR, err)
			}
		}
		for _, p := range []string{nodestate.Path, joinIntentPath} {
			if err := h.RemoveAll(p); err != nil {
				return fmt.Errorf("reset: remove %s: %w; %s", p, err, again)
			}
		}
		if err := wipeEtcdData(h); err != nil {
			return fmt.Errorf("reset: remove the etcd data in %s: %w; %s", version.EtcdDataDir, err, again)
		}
		for _, p := range left {
			if p == version.EtcdDataDir {
				continue // wiped above, the directory kept when a mount point or a link
			}
			if err := h.RemoveAll(p); err != nil {
				return fmt.Errorf("reset: remove %s: %w; %s", p, err, again)
			}
		}
		fmt.Fprintf(w, "control-plane files removed (%s, %s; the binaries in %s stay)\n", version.StateDir, version.K8sConfDir, strings.Join(keptBinDirs(h), ", "))
		if err := n.checkpoint(ctx, CheckpointResetAfterWipe); err != nil {
			return err
		}
		if err := h.Remove(resetJournalPath); err != nil {
			return fmt.Errorf("reset: remove the reset journal %s: %w; %s", resetJournalPath, err, again)
		}
		if empty, err := dirEmpty(h, version.StateDir); err == nil && empty {
			_ = h.Remove(version.StateDir)
		}
	}
	return nil
}

// publishRemaining publishes the etcd members for later joins once this
// node's member is removed, through the other members and their apiservers.
// It is best effort: the operator's next pass publishes them too.
func (n *Node) publishRemaining(ctx context.Context, o resetObservation) {
	own := urlHostOf(o.peerURL)
	others := slices.DeleteFunc(slices.Clone(o.asked), func(ip string) bool { return ip == own })
	if len(others) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, publishEtcdMembersWithin)
	defer cancel()
	if err := n.publishEtcdMembersVia(pctx, others); err != nil {
		n.log.Warn("the remaining etcd members were not published for later joins (the operator's next pass does it)", "err", err)
	}
}

// stopService stops one service; one this host does not know is not
// running, nor is anything on a host with no service manager (no stratum
// supervisor runs), and a stop that reports an error but leaves the service
// stopped is a warning (see stopControlPlane).
func (n *Node) stopService(ctx context.Context, s string) error {
	err := n.env.Host.StopService(ctx, s)
	if err == nil || host.NotRunHere(err) {
		return nil
	}
	if ss, serr := n.env.Host.ServiceStatus(ctx, s); serr == nil && !ss.Running {
		n.log.Warn("service stop reported an error, but the service is stopped", "service", s, "err", err)
		return nil
	}
	return fmt.Errorf("stop %s: %w", s, err)
}

// moveLeaderAway hands etcd's leadership to another started voter when this
// node's member leads, so its removal does not leave the cluster without a
// leader for an election timeout. It is best effort: a removed leader steps
// down by itself.
func (n *Node) moveLeaderAway(ctx context.Context, o resetObservation) {
	if len(o.asked) == 0 {
		return
	}
	own := o.asked[len(o.asked)-1]
	cli, err := n.etcdClient(EtcdEndpoint(own))
	if err != nil {
		return
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	st, err := cli.Status(rctx, EtcdEndpoint(own))
	if err != nil || st.Leader != st.Header.MemberId {
		return
	}
	ml, err := n.memberList(rctx, cli)
	if err != nil {
		return
	}
	for _, m := range ml.Members {
		if m.ID != st.Header.MemberId && !m.IsLearner && started(m) {
			if _, err := cli.MoveLeader(rctx, m.ID); err != nil {
				n.log.Info("etcd leadership not moved before this node's removal; the cluster elects a leader after it", "to", m.Name, "err", err)
				return
			}
			n.log.Info("etcd leadership moved before this node's removal", "to", m.Name)
			return
		}
	}
}
