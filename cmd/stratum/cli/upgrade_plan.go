package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/noderelease"
	"stratum.dev/stratum/internal/version"
)

// planReport is `stratum upgrade plan -o json`; its names are stable
// (docs/cli.md).
type planReport struct {
	// Release is what this stratum would upgrade the control planes to.
	Release planRelease `json:"release"`
	// ControlPlanes are the etcd members, each with what it runs, then any
	// recorded release of a node that is no member (stale).
	ControlPlanes []planRow `json:"controlPlanes"`
	// Healthy is the etcd cluster's health verdict; EtcdError why not.
	Healthy   bool   `json:"healthy"`
	EtcdError string `json:"etcdError,omitempty"`
	// ToUpgrade counts the control planes that do not run this release.
	ToUpgrade int `json:"toUpgrade"`
	// Next is what to do next, in words.
	Next string `json:"next"`
}

// planRelease is one release: a stratum and the versions it pins.
type planRelease struct {
	Stratum       string `json:"stratum"`
	Etcd          string `json:"etcd"`
	KubeAPIServer string `json:"kubeAPIServer"`
}

// planRow is one control plane in the plan.
type planRow struct {
	Node    string `json:"node"`
	Address string `json:"address,omitempty"`
	// Stratum is the release its supervisor recorded ("" when none did:
	// a stratum from before the record, or one that could not write it).
	Stratum string `json:"stratum,omitempty"`
	BinDir  string `json:"binDir,omitempty"`
	// Etcd is the etcd its member says it runs, KubeAPIServer what its
	// kube-apiserver answers on /version ("" when they did not answer).
	Etcd          string `json:"etcd,omitempty"`
	KubeAPIServer string `json:"kubeAPIServer,omitempty"`
	Health        string `json:"health"`
	// Verdict: "up to date", "to upgrade", "blocked: <why>", "unknown:
	// <why>", "joining: <why>" or "stale: <why>".
	Verdict string `json:"verdict"`
	// recordAge is how long ago its record was renewed; joining, that it
	// is a learner or not yet started.
	recordAge time.Duration
	joining   bool
	// recordOf is the etcd member a record under its name names, when that
	// is not its member: a record not yet rewritten since a snapshot
	// restore or an etcd rejoin gave the node a new member.
	recordOf string
}

func (a *app) upgradePlanCmd() *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show which release each control plane runs, and which ones this stratum would upgrade",
		Long: `List every control plane of the cluster (its etcd members) with what it runs: the
stratum its supervisor recorded in the cluster (a Lease
kube-system/stratum-release-<member>, written once its control plane is up and renewed
every 10 minutes; a stratum from before that record shows none), the etcd its member
says it runs and the kube-apiserver version its apiserver answers. Each is judged
against this stratum's release: "up to date", "to upgrade" (run this stratum's "upgrade
node" there, one control plane at a time), "blocked" when a version step Kubernetes or
etcd does not take stands in the way of the whole roll, "unknown" when a version was
not read or a record is not renewed, "joining" for a learner. A record of a node that
is no etcd member (reset, or replaced) is listed as stale. It changes nothing. Exits 0
once it could list the members (an unhealthy cluster is said, as upgrade node would
refuse it), 1 when it could not, 2 on bad usage, 3 on a machine that is no control
plane.`,
		Example: `  /opt/stratum/v2/bin/stratum upgrade plan
  stratum upgrade plan -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			rep, err := a.upgradePlan(cmd.Context())
			if err != nil {
				return err
			}
			return a.write(out, rep, func() error { return writePlan(a.stdout, rep) })
		},
	}
	out = addOutput(cmd, "table")
	return cmd
}

// upgradePlan gathers the plan: the members and their health through this
// node's etcd, each kube-apiserver's version, the recorded releases through
// this node's apiserver (or the admin kubeconfig's server).
func (a *app) upgradePlan(ctx context.Context) (planReport, error) {
	rep := planReport{Release: planRelease{Stratum: Version, Etcd: version.Etcd, KubeAPIServer: version.Kubernetes}, ControlPlanes: []planRow{}}
	n, h, err := a.localNode()
	if err != nil {
		return rep, err
	}
	st, err := loadState(h)
	if err != nil {
		return rep, err
	}
	members, err := etcdMembers(ctx, n, st.Etcd.ClientURL)
	if err != nil {
		return rep, fmt.Errorf("upgrade plan: %w", err)
	}
	if _, herr := etcdHealth(ctx, n, st); herr != nil {
		rep.EtcdError = herr.Error()
	} else {
		rep.Healthy = true
	}
	waiting := a.waitNotice()
	releases, rerr := recordedReleases(ctx, h, waiting)
	admin, aerr := adminRESTConfig(h, waiting) // without it, no kube-apiserver's version is read: unknown
	for _, m := range members {
		row := planRow{Node: m.Name, Address: m.ClientIP, Etcd: m.Version, Health: m.Health}
		if r, ok := releases[m.Name]; ok {
			delete(releases, m.Name)
			if r.MemberID == "" || r.MemberID == m.id {
				row.BinDir = r.BinDir
				row.Stratum, row.recordAge = r.Stratum, time.Since(r.Since)
			} else {
				row.recordOf = r.MemberID
			}
		}
		if m.ClientIP != "" && aerr == nil {
			if v, err := apiServerVersionAt(admin, m.ClientIP); err == nil {
				row.KubeAPIServer = v
			}
		}
		row.joining = m.Learner || m.ClientIP == ""
		rep.ControlPlanes = append(rep.ControlPlanes, row)
	}
	block := clusterBlock(rep.ControlPlanes, rep.Release)
	for i := range rep.ControlPlanes {
		row := &rep.ControlPlanes[i]
		row.Verdict = planVerdict(*row, rep.Release, block, rerr)
		if strings.HasPrefix(row.Verdict, "to upgrade") || strings.HasPrefix(row.Verdict, "blocked") {
			rep.ToUpgrade++
		}
	}
	for _, node := range noderelease.Nodes(releases) {
		r := releases[node]
		rep.ControlPlanes = append(rep.ControlPlanes, planRow{Node: node, Stratum: r.Stratum, BinDir: r.BinDir, Etcd: r.Etcd, KubeAPIServer: r.APIServer,
			Health: "no etcd member", Verdict: fmt.Sprintf("stale: no etcd member is named %s (a node reset, removed or replaced); its record, Lease %s/%s, may be deleted", node, noderelease.Namespace, noderelease.LeaseName(node))})
	}
	rep.Next = planNext(rep, rerr)
	return rep, nil
}

// releaseTrustedFor is how old a record may be and still be taken as what
// its node runs: its supervisor renews it every releaseRenewEvery.
const releaseTrustedFor = 3 * releaseRenewEvery

// recordedReleases lists the recorded releases through this node's own
// apiserver, or, when it does not answer, the admin kubeconfig's server
// (the VIP).
func recordedReleases(ctx context.Context, h host.Host, waiting func(string)) (map[string]noderelease.Release, error) {
	var errs []error
	if cs, err := localAdminClient(h, 10*time.Second, waiting); err == nil {
		r, err := noderelease.List(ctx, cs)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
	}
	cfg, err := adminRESTConfig(h, waiting)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	r, err := noderelease.List(ctx, cs)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return r, nil
}

// clusterBlock is what keeps the whole cluster from this release, as
// `upgrade node` judges it on any control plane: the etcd more than a minor
// above the lowest member's or below it, a kube-apiserver this release's is
// more than a minor above or below ("" when nothing does).
func clusterBlock(rows []planRow, to planRelease) string {
	var etcds []string
	for _, r := range rows {
		if r.Etcd != "" {
			etcds = append(etcds, r.Etcd)
		}
		if r.KubeAPIServer != "" {
			if err := apiServerStep(r.KubeAPIServer, to.KubeAPIServer); err != nil {
				return fmt.Sprintf("%s: %v", r.Node, err)
			}
		}
	}
	if err := etcdStep(etcds, to.Etcd); err != nil {
		return err.Error()
	}
	return ""
}

// planVerdict judges one member against this release: joining (a learner,
// or a member not yet started), unknown (a version not read), up to date,
// blocked (block, the cluster's), or to upgrade.
func planVerdict(row planRow, to planRelease, block string, releasesErr error) string {
	switch {
	case row.joining:
		return "joining: a learner or a member not yet started (a join under way): `upgrade node` waits for it to finish"
	case row.Etcd == "":
		return "unknown: its etcd member did not answer"
	case row.KubeAPIServer == "":
		return "unknown: its kube-apiserver did not answer /version"
	case releasesErr != nil:
		return "unknown: the recorded releases could not be read"
	case row.recordOf != "":
		return fmt.Sprintf("unknown: its release record names etcd member %s, not its member: a snapshot restore or an etcd rejoin gave it a new one, which its supervisor records within %s (a stratum from before that, at its next start)", row.recordOf, releaseCheckEvery)
	case row.Stratum != "" && row.recordAge > releaseTrustedFor:
		return fmt.Sprintf("unknown: its record (stratum %s) was last renewed %s ago, and a supervisor renews it every %s: it runs a stratum from before the record, or cannot reach its apiserver", row.Stratum, row.recordAge.Round(time.Minute), releaseRenewEvery)
	case row.Stratum == to.Stratum && row.Etcd == to.Etcd && row.KubeAPIServer == to.KubeAPIServer:
		return "up to date"
	case block != "":
		return "blocked: " + block
	case row.Stratum == "":
		return "to upgrade (no stratum recorded: a release from before the record)"
	}
	return "to upgrade"
}

// planNext says what to do next.
func planNext(rep planReport, releasesErr error) string {
	var notes []string
	if releasesErr != nil {
		notes = append(notes, fmt.Sprintf("the recorded releases could not be read (%v), so no control plane's stratum is known", releasesErr))
	}
	var to, unknown []string
	blocked := false
	for _, r := range rep.ControlPlanes {
		switch {
		case strings.HasPrefix(r.Verdict, "to upgrade"):
			to = append(to, r.Node)
		case strings.HasPrefix(r.Verdict, "unknown"), strings.HasPrefix(r.Verdict, "joining"):
			unknown = append(unknown, r.Node)
		case strings.HasPrefix(r.Verdict, "blocked"):
			blocked = true
		}
	}
	switch {
	case blocked:
		notes = append(notes, "this release cannot be rolled out from what the cluster runs (the blocked verdicts say which step): another release first")
	case !rep.Healthy && len(to) > 0:
		notes = append(notes, "the etcd cluster is not healthy, and `stratum upgrade node` refuses until it is: `stratum etcd members` shows each member")
	case len(to) > 0:
		notes = append(notes, fmt.Sprintf("%d of %d control planes to upgrade (%s): run this stratum's `upgrade node --bin-dir DIR` on each, one at a time", len(to), len(rep.ControlPlanes), strings.Join(to, ", ")))
	case len(unknown) == 0 && releasesErr == nil:
		notes = append(notes, fmt.Sprintf("every control plane runs stratum %s", rep.Release.Stratum))
	}
	if len(unknown) > 0 {
		notes = append(notes, fmt.Sprintf("not judged: %s (see their verdicts)", strings.Join(unknown, ", ")))
	}
	return strings.Join(notes, "; ")
}

// writePlan is the plan's human form.
func writePlan(w io.Writer, rep planReport) error {
	r := rep.Release
	fmt.Fprintf(w, "this release: stratum %s (etcd %s, kube-apiserver %s)\n", r.Stratum, r.Etcd, r.KubeAPIServer)
	if !rep.Healthy {
		fmt.Fprintf(w, "warning: %s\n", rep.EtcdError)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTROL PLANE\tADDRESS\tSTRATUM\tETCD\tKUBE-APISERVER\tVERDICT")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, c := range rep.ControlPlanes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Node, dash(c.Address), dash(c.Stratum), dash(c.Etcd), dash(c.KubeAPIServer), c.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nnext: %s\n", rep.Next)
	return err
}
