package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
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
	// Verdict: "up to date", "to upgrade", "blocked: <why>" or "stale:
	// <why>".
	Verdict string `json:"verdict"`
}

func (a *app) upgradePlanCmd() *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show which release each control plane runs, and which ones this stratum would upgrade",
		Long: `List every control plane of the cluster (its etcd members) with what it runs: the
stratum its supervisor recorded in the cluster at its last start (a Lease
kube-system/stratum-release-<node>; a stratum from before that record shows none), the
etcd its member says it runs and the kube-apiserver version its apiserver answers. Each
is judged against this stratum's release: "up to date", "to upgrade" (run this
stratum's "upgrade node" there, one control plane at a time), or "blocked" when a
version step Kubernetes or etcd does not take stands in the way. A recorded release of
a node that is no etcd member (reset, or replaced) is listed as stale. It changes
nothing. Exits 0 once it could list the members (an unhealthy cluster is said, as
upgrade node would refuse it), 1 otherwise.`,
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
// the admin kubeconfig's server.
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
	rows, err := etcdMembers(ctx, n, st.Etcd.ClientURL)
	if err != nil {
		return rep, fmt.Errorf("upgrade plan: %w", err)
	}
	if _, herr := etcdHealth(ctx, n, st); herr != nil {
		rep.EtcdError = herr.Error()
	} else {
		rep.Healthy = true
	}
	releases, rerr := recordedReleases(ctx, h)
	for _, m := range rows {
		row := planRow{Node: m.Name, Address: m.ClientIP, Etcd: m.Version, Health: m.Health}
		if r, ok := releases[m.Name]; ok {
			row.Stratum, row.BinDir = r.Stratum, r.BinDir
			delete(releases, m.Name)
		}
		if m.ClientIP != "" {
			if v, err := apiServerVersionAt(ctx, h, m.ClientIP); err == nil {
				row.KubeAPIServer = v
			}
		}
		row.Verdict = planVerdict(row, rep.Release)
		if row.Verdict != "up to date" {
			rep.ToUpgrade++
		}
		rep.ControlPlanes = append(rep.ControlPlanes, row)
	}
	for _, node := range noderelease.Nodes(releases) {
		r := releases[node]
		rep.ControlPlanes = append(rep.ControlPlanes, planRow{Node: node, Stratum: r.Stratum, BinDir: r.BinDir, Etcd: r.Etcd, KubeAPIServer: r.APIServer,
			Health: "no etcd member", Verdict: fmt.Sprintf("stale: no etcd member is named %s (a node reset or replaced); its record, Lease %s/%s, may be deleted", node, noderelease.Namespace, noderelease.LeaseName(node))})
	}
	rep.Next = planNext(rep, rerr)
	return rep, nil
}

// recordedReleases lists the recorded releases through the admin
// kubeconfig's server (the VIP, or this node's apiserver).
func recordedReleases(ctx context.Context, h host.Host) (map[string]noderelease.Release, error) {
	cfg, err := adminRESTConfig(h)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return noderelease.List(ctx, cs)
}

// planVerdict judges one member against this release.
func planVerdict(row planRow, to planRelease) string {
	if row.Stratum == to.Stratum && row.Etcd == to.Etcd && row.KubeAPIServer == to.KubeAPIServer {
		return "up to date"
	}
	if row.KubeAPIServer != "" {
		if err := apiServerStep(row.KubeAPIServer, to.KubeAPIServer); err != nil {
			return "blocked: " + err.Error()
		}
	}
	if row.Etcd != "" {
		if err := etcdStep([]string{row.Etcd}, to.Etcd); err != nil {
			return "blocked: " + err.Error()
		}
	}
	return "to upgrade"
}

// planNext says what to do next.
func planNext(rep planReport, releasesErr error) string {
	var notes []string
	if releasesErr != nil {
		notes = append(notes, fmt.Sprintf("the recorded releases could not be read (%v), so no stratum version is known", releasesErr))
	}
	switch {
	case rep.ToUpgrade == 0:
		notes = append(notes, fmt.Sprintf("every control plane runs stratum %s", rep.Release.Stratum))
	case !rep.Healthy:
		notes = append(notes, "the etcd cluster is not healthy, and `stratum upgrade node` refuses until it is: `stratum etcd members` shows each member")
	default:
		var to []string
		for _, r := range rep.ControlPlanes {
			if r.Verdict == "to upgrade" {
				to = append(to, r.Node)
			}
		}
		if len(to) > 0 {
			notes = append(notes, fmt.Sprintf("%d of %d control planes to upgrade (%s): run this stratum's `upgrade node --bin-dir DIR` on each, one at a time", len(to), len(rep.ControlPlanes), strings.Join(to, ", ")))
		}
		if rep.ToUpgrade > len(to) {
			notes = append(notes, "a blocked control plane needs another release first (its verdict says which step)")
		}
	}
	return strings.Join(slices.Compact(notes), "; ")
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
