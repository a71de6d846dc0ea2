package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/sim"

	"stratum.dev/stratum/internal/token"
)

// The MCP server (`stratum mcp`): this control plane's read operations and
// its guarded writes as tools over stdio (github.com/modelcontextprotocol/go-sdk),
// each running the same code as its command. A write refuses unless its
// input says confirm: true, so an agent cannot change the cluster by
// exploring it.

// errNotConfirmed is a guarded write called without confirm: true.
var errNotConfirmed = errors.New("this tool changes the cluster: call it again with confirm: true; nothing was changed")

type (
	noInput    struct{}
	membersOut struct {
		Members []memberRow `json:"members"`
	}
	tokensOut struct {
		Tokens []token.Info `json:"tokens"`
	}
	tokenCreateIn struct {
		ControlPlane bool   `json:"controlPlane,omitempty" jsonschema:"mint a control-plane join grant (token, certificate-key, uploaded shared certificates) instead of a worker token"`
		TTL          string `json:"ttl,omitempty" jsonschema:"how long the token authenticates, as a Go duration (default 2h; at most 24h with controlPlane)"`
		Confirm      bool   `json:"confirm,omitempty" jsonschema:"must be true: this tool creates a credential of the cluster"`
	}
	confirmIn struct {
		Confirm bool `json:"confirm,omitempty" jsonschema:"must be true: this tool changes the cluster"`
	}
	doneOut struct {
		Done string `json:"done"`
	}
	rejoinIn struct {
		Server  string `json:"server" jsonschema:"the restored seed control plane's IP, or a URL naming it (https://IP:6443)"`
		Force   bool   `json:"force,omitempty" jsonschema:"remove this node's etcd data even while its old cluster may still have a quorum (only when the server was started with --allow-forced-rejoin, dry runs aside)"`
		DryRun  bool   `json:"dryRun,omitempty" jsonschema:"print the plan and change nothing (needs no confirm)"`
		Confirm bool   `json:"confirm,omitempty" jsonschema:"must be true unless dryRun: this tool wipes and rejoins this node's etcd"`
	}
	reportOut struct {
		Report string `json:"report"`
	}
	simEventsIn struct {
		File     string `json:"file" jsonschema:"the event log a running (or finished) simulation writes: the FILE of stratum sim up --events FILE"`
		Kind     string `json:"kind,omitempty" jsonschema:"only events of this kind: action, fault, heal, checkpoint, crash, service, vip, leader (an etcd member's view of its leader), client (a client operation) or error"`
		Host     string `json:"host,omitempty" jsonschema:"only events on this host (cp1, cp2, ...)"`
		Contains string `json:"contains,omitempty" jsonschema:"only events whose text contains this"`
		Last     int    `json:"last,omitempty" jsonschema:"only the last N of the matching events"`
	}
	simEventsOut struct {
		// Total is how many events the log holds; Events the matching ones.
		Total  int         `json:"total"`
		Events []sim.Event `json:"events"`
	}
)

// mcpServer is the MCP server over this machine's (or Options.Host's) node.
// errControlPlaneGrantsNotAllowed refuses an agent's control-plane grant
// unless `stratum mcp` was started with --allow-control-plane-grants: the
// grant's certificate-key opens the cluster's CA keys, and an agent's
// confirm is its own (a prompt-injected agent sets it too), so the operator
// who starts the server decides, not the agent.
var errControlPlaneGrantsNotAllowed = errors.New("token_create refused: a control-plane grant opens the cluster's CA keys, and this server was started without --allow-control-plane-grants, so an agent's confirm does not mint one; nothing was created: run `stratum token create --control-plane` yourself, or restart the server with `stratum mcp --allow-control-plane-grants`")

// forcedRejoinNotAllowed refuses an agent's forced etcd_rejoin onto seed
// unless `stratum mcp` was started with --allow-forced-rejoin: force removes
// this node's etcd data while its old cluster may still have a quorum (a
// member of a live cluster wiped), and an agent's confirm is its own, so the
// operator who starts the server decides, not the agent. A dry run, which
// changes nothing, needs no flag.
func forcedRejoinNotAllowed(seed string) error {
	return fmt.Errorf("etcd_rejoin refused: force removes this node's etcd data even while its old cluster may still have a quorum, and this server was started without --allow-forced-rejoin, so an agent's confirm does not force it; nothing was changed: run `stratum etcd rejoin --server %s --force` yourself, or restart the server with `stratum mcp --allow-forced-rejoin`", seed)
}

// mcpAllow is what the operator who started `stratum mcp` lets an agent do
// beyond its confirm.
type mcpAllow struct {
	// ControlPlaneGrants is --allow-control-plane-grants.
	ControlPlaneGrants bool
	// ForcedRejoin is --allow-forced-rejoin.
	ForcedRejoin bool
}

// mcpServer is `stratum mcp`'s server, letting an agent do what allow says.
func (a *app) mcpServer(allow mcpAllow) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "stratum", Version: Version}, nil)
	read := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s, &mcp.Tool{Name: "etcd_members", Description: "The etcd members with each one's own status: voter or learner, leader, health (as `stratum etcd members -o json`).", Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, membersOut, error) {
			n, _, st, err := a.controlPlaneNode()
			if err != nil {
				return nil, membersOut{}, err
			}
			rows, err := etcdMembers(ctx, n, st.Etcd.ClientURL)
			return nil, membersOut{Members: rows}, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "etcd_health", Description: "Whether every etcd member answers, knows a leader, raises no alarm and all agree on one leader (as `stratum etcd health -o json`).", Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, healthReport, error) {
			n, _, st, err := a.controlPlaneNode()
			if err != nil {
				return nil, healthReport{}, err
			}
			rep, _ := etcdHealth(ctx, n, st) // the verdict is in the report
			return nil, rep, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "certs_check", Description: "Every CA, leaf and kubeconfig client certificate on this node with its expiry, and the shared certificates' key age (as `stratum certs check -o json`).", Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, certsReport, error) {
			n, h, err := a.localNode()
			if err != nil {
				return nil, certsReport{}, err
			}
			if _, err := loadState(h); err != nil {
				return nil, certsReport{}, err
			}
			rep, err := buildCertsReport(ctx, n, h)
			return nil, rep, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "token_list", Description: "The cluster's bootstrap tokens: ID, kind, expiry, live (never the secret), as `stratum token list -o json`.", Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, tokensOut, error) {
			_, h, cs, err := a.adminNode()
			if err != nil {
				return nil, tokensOut{}, err
			}
			list, err := token.List(ctx, cs, h.Now())
			if list == nil {
				list = []token.Info{}
			}
			return nil, tokensOut{Tokens: list}, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "node_state", Description: "This node's saved control-plane state (name, address, server, VIP, etcd member, cluster ID), whether an interrupted join's intent journal survives, whether a reset is under way, its supervisor's services, and the problem `stratum status` would exit 1 for with what to do (as `stratum status -o json`).", Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, statusReport, error) {
			n, h, err := a.localNode()
			if err != nil {
				return nil, statusReport{}, err
			}
			rep, err := nodeStatus(ctx, n, h)
			if err != nil {
				return nil, statusReport{}, err
			}
			rep.judge(rep.askSupervisor(ctx, h)) // the report carries it as problem
			return nil, rep, nil
		})

	mcp.AddTool(s, &mcp.Tool{Name: "grants_list", Description: "The control-plane join grants in the shared-certificate Secret, each with whether its bootstrap token exists and is live, and the Secret's size against its budget (as `stratum grants list -o json`).", Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ noInput) (*mcp.CallToolResult, ha.GrantsReport, error) {
			_, h, cs, err := a.adminNode()
			if err != nil {
				return nil, ha.GrantsReport{}, err
			}
			rep, err := ha.ListGrants(ctx, cs, h.Now())
			return nil, rep, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sim_events", Description: "The events of a simulation run by `stratum sim up --events FILE` (kept current while it runs with --keep): actions, faults, checkpoints, crashes, services, VIP moves and etcd leader changes per host, filtered by kind, host or text (`stratum sim timeline FILE` draws the same log as a page).", Annotations: read},
		func(ctx context.Context, _ *mcp.CallToolRequest, in simEventsIn) (*mcp.CallToolResult, simEventsOut, error) {
			if strings.TrimSpace(in.File) == "" {
				return nil, simEventsOut{}, errors.New("file is required: the FILE given to `stratum sim up --events FILE`")
			}
			if in.Last < 0 {
				return nil, simEventsOut{}, fmt.Errorf("last %d: want a positive count, or 0 for all", in.Last)
			}
			if in.Kind != "" && !slices.Contains(sim.EventKinds, in.Kind) {
				return nil, simEventsOut{}, fmt.Errorf("kind %q is not an event kind: want one of %s", in.Kind, strings.Join(sim.EventKinds, ", "))
			}
			evs, err := readEvents(in.File)
			if err != nil {
				return nil, simEventsOut{}, err
			}
			out := simEventsOut{Total: len(evs), Events: []sim.Event{}}
			for _, e := range evs {
				if (in.Kind == "" || e.Kind == in.Kind) && (in.Host == "" || e.Host == in.Host) && strings.Contains(e.What, in.Contains) {
					out.Events = append(out.Events, e)
				}
			}
			if in.Last > 0 && len(out.Events) > in.Last {
				out.Events = out.Events[len(out.Events)-in.Last:]
			}
			return nil, out, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "token_create", Description: "Mint a join token (with controlPlane, a control-plane join grant and its join command, only when the server was started with --allow-control-plane-grants). Refused unless confirm is true."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in tokenCreateIn) (*mcp.CallToolResult, mintedReport, error) {
			// Its input first: a call that cannot succeed is not sent back
			// for a confirm.
			ttl := token.DefaultTTL
			if in.TTL != "" {
				d, err := time.ParseDuration(in.TTL)
				if err != nil || d <= 0 {
					return nil, mintedReport{}, fmt.Errorf("ttl %q: want a positive duration such as 30m or 2h; nothing was created", in.TTL)
				}
				ttl = d
			}
			if err := checkGrantTTL(ttl, in.ControlPlane); err != nil {
				return nil, mintedReport{}, fmt.Errorf("%w; nothing was created", err)
			}
			if in.ControlPlane && !allow.ControlPlaneGrants {
				return nil, mintedReport{}, errControlPlaneGrantsNotAllowed
			}
			if !in.Confirm {
				return nil, mintedReport{}, errNotConfirmed
			}
			n, h, err := a.localNode()
			if err != nil {
				return nil, mintedReport{}, err
			}
			m, server, err := mintGrant(ctx, n, h, ttl, in.ControlPlane, a.waitNotice())
			if err != nil {
				return nil, mintedReport{}, err
			}
			return nil, mintedReportOf(m, server, in.ControlPlane), nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "grants_prune", Description: "Drop the grant entries of expired or deleted tokens from the shared-certificate Secret. Refused unless confirm is true."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in confirmIn) (*mcp.CallToolResult, doneOut, error) {
			if !in.Confirm {
				return nil, doneOut{}, errNotConfirmed
			}
			n, _, cs, err := a.adminNode()
			if err != nil {
				return nil, doneOut{}, err
			}
			dropped, err := n.PruneGrants(ctx, cs)
			if err != nil {
				return nil, doneOut{}, err
			}
			return nil, doneOut{Done: prunedLine(dropped)}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "etcd_rejoin", Description: "Rejoin this control plane's etcd to a cluster restored from a snapshot on the seed (server). Call it with dryRun first: that prints the plan and changes nothing; the rejoin itself is refused unless confirm is true, and with force unless the server was started with --allow-forced-rejoin."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in rejoinIn) (*mcp.CallToolResult, reportOut, error) {
			if strings.TrimSpace(in.Server) == "" {
				return nil, reportOut{}, errors.New("server is required: the restored seed control plane's IP; nothing was changed")
			}
			seed := seedAddress(strings.TrimSpace(in.Server))
			if net.ParseIP(seed) == nil {
				return nil, reportOut{}, fmt.Errorf("server %q is not an IP address (the restored seed control plane's, or its https://IP:6443 URL); nothing was changed", in.Server)
			}
			if in.Force && !in.DryRun && !allow.ForcedRejoin {
				return nil, reportOut{}, forcedRejoinNotAllowed(seed)
			}
			if !in.DryRun && !in.Confirm {
				return nil, reportOut{}, errNotConfirmed
			}
			n, _, err := a.localNode()
			if err != nil {
				return nil, reportOut{}, err
			}
			var buf bytes.Buffer
			if in.DryRun {
				err = n.RejoinPlan(ctx, &buf, seed, in.Force)
			} else {
				err = n.RejoinEtcd(ctx, &buf, seed, in.Force)
			}
			if err != nil {
				return nil, reportOut{}, fmt.Errorf("%w\n%s", explainHost(err), buf.String())
			}
			return nil, reportOut{Report: buf.String()}, nil
		})
	return s
}

// protocolOwnsStdout sends what the commands' code prints on its own (step
// and waiting lines through Env.Progress) to stderr: under `stratum mcp`
// stdout carries the protocol's JSON-RPC, and a stray line would break it.
func (a *app) protocolOwnsStdout() { a.stdout = a.stderr }

func (a *app) mcpCmd() *cobra.Command {
	var allow mcpAllow
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve this control plane's operations to an MCP client over stdio",
		Long: `Run a Model Context Protocol server on stdin/stdout, for an agent or an MCP client.
Read tools: etcd_members, etcd_health, certs_check, token_list, grants_list,
node_state, and sim_events (a simulation's event log, from "stratum sim up --events
FILE"). Guarded writes: token_create, grants_prune, etcd_rejoin (dryRun first); each
refuses, changing nothing, unless its input has confirm: true; token_create mints a
control-plane grant (a root credential: its certificate-key opens the CA keys) only
with --allow-control-plane-grants, and etcd_rejoin with force (its old cluster may still
have a quorum) runs only with --allow-forced-rejoin, since the agent sets confirm itself.
Each tool runs the code of its command (node_state is "status -o json", grants_prune is
"grants prune") and returns its JSON (the fields docs/cli.md documents). Run it as root on a control plane:
the node's state and admin kubeconfig are readable by root alone.`,
		Example: `  # In an MCP client's configuration, on a control plane:
  #   {"command": "sudo", "args": ["stratum", "mcp"]}
  sudo stratum mcp

  # Let the agent mint control-plane join grants too
  sudo stratum mcp --allow-control-plane-grants

  # ...and let it force a rejoin of this node's etcd after a restore
  sudo stratum mcp --allow-forced-rejoin`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.protocolOwnsStdout()
			return serveMCP(cmd.Context(), a.mcpServer(allow), &mcp.StdioTransport{})
		},
	}
	cmd.Flags().BoolVar(&allow.ControlPlaneGrants, "allow-control-plane-grants", false, "let token_create mint control-plane join grants (their certificate-key opens the cluster's CA keys)")
	cmd.Flags().BoolVar(&allow.ForcedRejoin, "allow-forced-rejoin", false, "let etcd_rejoin force a rejoin (it removes this node's etcd data even while its old cluster may still have a quorum)")
	return cmd
}

// serveMCP runs s on t until ctx ends (the command's signal) or the client
// goes. Every call in flight is cancelled when ctx ends: the SDK neither
// passes a stdio server's end on to its handlers nor returns before they
// do, so a tool of minutes (an etcd_rejoin waiting on its promotion) held
// `stratum mcp` past SIGINT and SIGTERM until it finished. A call cancelled
// so stops at its operation's next step boundary, as the same command
// stopped by Ctrl-C does.
func serveMCP(ctx context.Context, s *mcp.Server, t mcp.Transport) error {
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(rctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			rctx, cancel := context.WithCancelCause(rctx)
			defer cancel(nil)
			defer context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })()
			return next(rctx, method, req)
		}
	})
	err := s.Run(ctx, t)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
