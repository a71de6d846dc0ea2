// Package cli is the stratum command tree (cobra): the commands that act on
// a machine (`up`, `server`, `token create`, `etcd members|health|rejoin`,
// `certs check`, `grants prune`, `repoint`, `snapshot`) and the simulator
// (`stratum sim up`), which runs the same bring-up and join on simulated
// hosts. cmd/stratum is its production wrapper (this machine, signals); the
// scenarios run it on simulated hosts through Run, so what they check is what
// an operator types.
//
// The CLI is thin: flags in, sim / ha / internal calls, printed results out.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/sim"
)

// Exit codes Run returns (docs/cli.md, "Exit codes").
const (
	// ExitOK: done (a report printed, an operation completed, a dry run
	// whose operation would proceed).
	ExitOK = 0
	// ExitFail: failed after it may have changed something (re-running the
	// same command resumes or converges), or a check's verdict is negative
	// (etcd health, certs check, status).
	ExitFail = 1
	// ExitUsage: bad usage (unknown command or flag, wrong arguments, a
	// malformed value); nothing was changed.
	ExitUsage = 2
	// ExitRefused: refused before changing anything (ha.ErrRefused): the
	// node and the cluster are as they were, and the error says why and what
	// to do. A dry run exits with it when its operation would be refused.
	ExitRefused = 3
)

// Options are a run's seams; the zero value is production (this machine).
type Options struct {
	// Host, when set, is the machine the real-host commands act on instead
	// of host.Local: a simulated host's Handle in the scenarios, a temporary
	// root in tests. It is called once per command.
	Host func() (host.Host, error)
	// Checkpoint is the ha.Env checkpoint hook of the nodes the real-host
	// commands build (nil in production: no checkpoints), so a simulation
	// can crash, pause or fail a command at a named point.
	Checkpoint func(ctx context.Context, name string) error
	// OnCluster, when set, is called with each cluster `sim up` brings up,
	// right after it is up, so a test can learn its directory and check
	// that nothing it started survives the run.
	OnCluster func(*sim.Cluster)
	// Exec, when set, replaces this process with the program at path ("":
	// this very binary, even if its file was replaced since it started)
	// run as argv (argv[0] its name) in env, as execve does; cmd/stratum
	// sets it. `stratum server` on a real host uses it once, before it
	// changes anything, to run itself again with the join secrets it was
	// given as flags moved into its environment: /proc/<pid>/cmdline, which
	// every local user reads, then no longer carries them for the life of
	// the supervisor. A supervisor uses it to run a newer stratum in its
	// place (`stratum upgrade node`). Nil (tests) leaves the secrets where
	// they are, and a supervisor refuses to be replaced.
	Exec func(path string, argv, env []string) error
}

// Run executes the command line args (without the program name) under ctx,
// writing results to stdout and diagnostics to stderr, and returns the
// process exit code (ExitOK, ExitFail, ExitUsage or ExitRefused). Cancelling ctx stops the
// command; every command tears down what it started before returning. Signal
// handling is the caller's (cmd/stratum cancels ctx on SIGINT, SIGTERM and SIGHUP),
// with one exception: `stratum server`'s join is not under ctx but answers
// SIGINT and SIGTERM itself (internal/interrupt), so a signal between its
// etcd member-add and its saved node state is held until that window closes;
// a caller that needs a bound on a join waits for Run with its own deadline.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, o Options) int {
	app := &app{stdout: stdout, stderr: stderr, opts: o, args: args}
	root := app.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if ue := (usageError{}); errors.As(err, &ue) {
		fmt.Fprintf(stderr, "stratum: %v\n\n", err)
		if cmd == nil {
			cmd = root
		}
		fmt.Fprint(stderr, cmd.UsageString())
		return ExitUsage
	}
	fmt.Fprintf(stderr, "stratum: %v\n", err)
	if ha.IsRefusal(err) {
		return ExitRefused
	}
	return ExitFail
}

// refused marks err as a refusal: returned before the command changed
// anything (ExitRefused).
func refused(err error) error { return ha.Refusal(err) }

// refusedf is refused(fmt.Errorf(format, args...)).
func refusedf(format string, args ...any) error { return ha.Refusal(fmt.Errorf(format, args...)) }

// usageError is a command line the CLI does not accept (as opposed to a
// command that was understood and then refused or failed).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// flagValueWants says, by a flag's pflag type, what value it takes: a
// malformed value's message says this instead of the Go parser's error
// (`time: invalid duration "banana"`, `strconv.ParseInt: parsing ...`).
var flagValueWants = map[string]string{
	"duration": "a duration like 30s, 5m or 2h",
	"int":      "a whole number",
	"bool":     "true or false",
}

// plainFlagError rewrites pflag's error for a flag value it could not parse
// so that it says what the flag wants; any other error is returned as is.
func plainFlagError(err error) error {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err
	}
	f := ive.GetFlag()
	want, ok := flagValueWants[f.Value.Type()]
	if !ok {
		return err
	}
	name := "--" + f.Name
	if f.Shorthand != "" && f.ShorthandDeprecated == "" {
		name = "-" + f.Shorthand + ", " + name
	}
	return &flagValueError{msg: fmt.Sprintf("invalid argument %q for %q flag: want %s", ive.GetValue(), name, want), err: err}
}

// flagValueError is a flag value pflag could not parse, said in plain words;
// it wraps pflag's error.
type flagValueError struct {
	msg string
	err error
}

func (e *flagValueError) Error() string { return e.msg }
func (e *flagValueError) Unwrap() error { return e.err }

// usageArgs wraps an argument validator so that its refusal is a usage error.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// app is one invocation's shared state: its streams, options and logger.
type app struct {
	stdout, stderr io.Writer
	opts           Options
	// args is the command line Run was given, without the program name.
	args     []string
	logLevel string
	log      *slog.Logger
	// replacementLocks releases the node's locks a supervisor took when it
	// accepted a replacement (checkReplacement); an exec releases them
	// itself (their files are closed on exec).
	replacementLocks func()
	// machineOutput is set when the command's -o is json or yaml: its
	// stdout is then the document alone, and progress goes to stderr.
	machineOutput bool
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "stratum",
		Short: "stratum: HA control-plane join for a Kubernetes distribution, with a simulator",
		Long: `stratum is a Kubernetes distribution's node agent and CLI; this build is the reference
implementation of its HA control-plane join. A new control-plane node downloads the
cluster's shared certificates from an encrypted Secret (authenticated by a control-plane
bootstrap token, decrypted with a certificate key passed out of band), joins etcd as a
live member (learner first, promoted once caught up) and brings up its own
kube-apiserver, while every client reaches the control planes through one VIP. The same
code runs first on simulated hosts (embedded etcd members and real kube-apiserver
processes driven from one process) via "stratum sim", before it acts on real machines.`,
		Example: `  # Try the whole flow: bootstrap, mint, join two more control planes, check, tear down
  stratum sim up --control-planes 3

  # On a real host: the first control plane (it stays in the foreground as the
  # node's supervisor), then, in another shell, a grant for the next one
  stratum up --vip 10.0.0.10
  stratum token create --control-plane

  # Print stratum's version and the pinned Kubernetes and etcd versions
  stratum version`,
		Args:          cobra.ArbitraryArgs,
		RunE:          groupRun,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(a.logLevel)); err != nil {
				return usagef("--log-level %q: want debug, info, warn or error", a.logLevel)
			}
			h := slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: lvl})
			a.log = slog.New(h)
			routeKlog(h, lvl <= slog.LevelDebug)
			if f := cmd.Flags().Lookup("output"); f != nil {
				a.machineOutput = f.Value.String() == "json" || f.Value.String() == "yaml"
			}
			return nil
		},
	}
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{plainFlagError(err)} })
	root.AddCommand(a.upCmd(), a.serverCmd(), a.tokenCmd(), a.withRejoin(a.etcdCmd()), a.certsCmd(), a.grantsCmd(), a.simCmd(), a.versionCmd(), a.repointCmd(), a.snapshotCmd(), a.installCmd(), a.statusCmd(), a.operatorCmd(), a.mcpCmd(), a.resetCmd(), a.upgradeCmd())
	if a.stdout != nil {
		root.SetOut(a.stdout)
	}
	if a.stderr != nil {
		root.SetErr(a.stderr)
	}
	addCompletionExamples(root)
	return root
}

// completionExamples are the examples of cobra's completion commands, which
// come without any.
var completionExamples = map[string]string{
	"completion": `  stratum completion bash > /etc/bash_completion.d/stratum`,
	"bash": `  # This shell, now
  source <(stratum completion bash)
  # Every new shell
  stratum completion bash > /etc/bash_completion.d/stratum`,
	"zsh":        `  stratum completion zsh > "${fpath[1]}/_stratum"`,
	"fish":       `  stratum completion fish > ~/.config/fish/completions/stratum.fish`,
	"powershell": `  stratum completion powershell | Out-String | Invoke-Expression`,
}

// addCompletionExamples adds cobra's default completion command now, rather
// than at Execute, so its help and its shells' help carry examples. Cobra
// binds the scripts' writer when it makes the command: the root's output
// must be set first.
// Its arguments follow the exit codes of every other command: an unknown
// shell or an extra argument is bad usage (exit 2), where cobra's own
// printed the help with exit 0, or exited 1.
func addCompletionExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = completionExamples[c.Name()]
		c.Args, c.RunE = cobra.ArbitraryArgs, groupRun
		for _, sh := range c.Commands() {
			sh.Example = completionExamples[sh.Name()]
			if sh.Args != nil {
				sh.Args = usageArgs(sh.Args)
			}
		}
	}
	root.SetHelpCommand(helpCmd(root))
}

// helpCmd is `stratum help [command]`: cobra's, except that a command that
// does not exist is bad usage (exit 2), not a line of text and exit 0.
func helpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help provides help for any command in the application: stratum help [command] prints the command's full help.",
		Example: `  stratum help up
  stratum help etcd rejoin`,
		ValidArgsFunction: func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			cmd, _, err := root.Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return usageError{fmt.Errorf("unknown help topic %q: `stratum --help` lists the commands", strings.Join(args, " "))}
			}
			return cmd.Help()
		},
	}
}

// groupRun is the RunE of a command that only groups subcommands: with no
// arguments it prints its help; an argument is an unknown subcommand.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}

// klogRoute guards klog's process-wide logger: commands run in one process
// (the tests, two at a time) must not rewrite it under each other's
// clients.
var klogRoute struct {
	sync.Mutex
	silenced bool
}

// routeKlog sends klog (client-go's logging: the simulator's VIP leader
// election) to h at debug level when debug is on, and nowhere otherwise:
// its messages, errors included, are debug detail to a stratum user. A
// process that already discards klog is left as it is.
func routeKlog(h slog.Handler, debug bool) {
	klogRoute.Lock()
	defer klogRoute.Unlock()
	// The simulator silences klog when it first starts a cluster in this
	// process; taken first, its silencing cannot undo a debug route.
	sim.QuietKlog()
	if debug {
		klog.SetLogger(logr.FromSlogHandler(debugHandler{h}))
		klogRoute.silenced = false
		return
	}
	if !klogRoute.silenced {
		// A logger replaces every klog output, stderr for errors included.
		klog.SetLogger(logr.Discard())
		klogRoute.silenced = true
	}
}

// debugHandler logs every record at debug level: for libraries whose own
// errors are routine detail to a stratum user.
type debugHandler struct{ slog.Handler }

func (h debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugHandler) Handle(ctx context.Context, r slog.Record) error {
	// logr hands errors over without asking Enabled first.
	if !h.Handler.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h debugHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return debugHandler{h.Handler.WithAttrs(attrs)}
}

func (h debugHandler) WithGroup(name string) slog.Handler {
	return debugHandler{h.Handler.WithGroup(name)}
}
