package cli

import (
	"fmt"
	"runtime"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/internal/version"
)

// Version is stratum's own version, set at build time:
//
//	go build -ldflags "-X stratum.dev/stratum/cmd/stratum/cli.Version=v0.1.0" ./cmd/stratum
var Version = "dev"

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print stratum's version and the component versions it runs",
		Long: `Print stratum's own version and the component versions this release pins
(internal/version): the Kubernetes version of the kube-apiserver it runs, the etcd
version of its members, and the previous etcd minor it can downgrade to. The
simulator and the tests run binaries built from the same pins (make assets).`,
		Example: `  stratum version`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "stratum\t%s\n", Version)
			fmt.Fprintf(w, "kubernetes\t%s\n", version.Kubernetes)
			fmt.Fprintf(w, "etcd\t%s\n", version.Etcd)
			fmt.Fprintf(w, "etcd (previous)\t%s\n", version.EtcdPrevious)
			fmt.Fprintf(w, "go\t%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return w.Flush()
		},
	}
}
