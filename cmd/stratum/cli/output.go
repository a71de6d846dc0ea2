package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"stratum.dev/stratum/internal/host"
)

// output is a reporting command's -o flag: its human form (a table or a
// line of text, the default) or a machine-readable one, json or yaml, with
// the field names docs/cli.md documents. yaml is the json document in YAML
// (the same names), as kubectl's -o yaml is.
type output struct {
	human  string // "table" or "text"
	format string
}

// addOutput registers -o on cmd with human as its default; the returned
// output is read once the command runs.
func addOutput(cmd *cobra.Command, human string) *output {
	o := &output{human: human}
	cmd.Flags().StringVarP(&o.format, "output", "o", human, fmt.Sprintf("output `format`: %s, json or yaml", human))
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{human, "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp
	})
	return o
}

// check refuses an -o value the command does not print, as bad usage.
func (o *output) check() error {
	switch o.format {
	case o.human, "json", "yaml":
		return nil
	}
	return usagef("-o %q: want %s, json or yaml", o.format, o.human)
}

// machine reports whether the report goes out as json or yaml.
func (o *output) machine() bool { return o.format == "json" || o.format == "yaml" }

// write prints v in the machine format, or calls human for the human one.
func (a *app) write(o *output, v any, human func() error) error {
	switch o.format {
	case "json":
		return a.writeJSON(v)
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode the report as YAML: %w", err)
		}
		_, err = a.stdout.Write(data)
		return err
	}
	return human()
}

// adminReport is the RunE of a command that reads a report through this
// control plane's admin kubeconfig and prints it in -o's form (human writes
// the human one).
func adminReport[T any](a *app, out *output, read func(context.Context, host.Host, kubernetes.Interface) (T, error), human func(io.Writer, T) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := out.check(); err != nil {
			return err
		}
		_, h, cs, err := a.adminNode()
		if err != nil {
			return err
		}
		rep, err := read(cmd.Context(), h, cs)
		if err != nil {
			return err
		}
		return a.write(out, rep, func() error { return human(a.stdout, rep) })
	}
}

// writeJSON writes v as indented JSON: the machine-readable form of a
// command's report, its field names documented in docs/cli.md.
func (a *app) writeJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
