package main

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// errFindings marks a command that ran and printed what it found, and
// exits 1 because of it (analyze with errors): run prints nothing more.
var errFindings = errors.New("findings")

// legacyFunc is a command that parses its own flags (the standard flag
// package) and reports bad ones as usage errors, as navectl's first
// commands do.
type legacyFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// legacyCommand is one such command, registered by one line in
// legacyCommands: its path under navectl ("token create"), a one-line
// summary, and the flags it takes (for shell completion only; the command
// parses them itself, so their spelling and messages stay as they were).
type legacyCommand struct {
	path, short string
	fn          legacyFunc
	flags       []string
}

// toStdout adapts a command that writes only to stdout.
func toStdout(fn func(ctx context.Context, args []string, stdout io.Writer) error) legacyFunc {
	return func(ctx context.Context, args []string, stdout, _ io.Writer) error { return fn(ctx, args, stdout) }
}

// stateFlagNames are the flags that say where the hub's state is.
var stateFlagNames = []string{"--state-dir", "--state-store", "--state-namespace", "--kubeconfig"}

// legacyCommands are the commands on the hub's state and CAs. A command
// that parses its own flags is added here with one line.
func legacyCommands() []legacyCommand {
	return []legacyCommand{
		{"token create", "print a one-time join token for (MESH, CLUSTER)", tokenCreate,
			append([]string{"--mesh", "--cluster", "--ttl", "--namespaces"}, stateFlagNames...)},
		{"token list", "list join tokens (pending, expired, used); never their secrets", toStdout(tokenList), stateFlagNames},
		{"cluster list", "list enrolled and revoked clusters", toStdout(clusterList), stateFlagNames},
		{"cluster revoke", "cut a cluster off: its streams are closed, its renewals refused", toStdout(clusterRevoke),
			append([]string{"--mesh", "--cluster", "--force"}, stateFlagNames...)},
		{"ca-hash", "print the pin (sha256:...) of CA certificates, for a spoke's first contact", toStdout(caHash), stateFlagNames},
		{"cert issue", "issue a workload certificate from a mesh's CA", certIssue,
			[]string{"--state-dir", "--mesh", "--trust-domain", "--namespace", "--service-account", "--out", "--ttl",
				"--ca-store", "--ca-namespace", "--kubeconfig"}},
		{"roots add", "rotate a mesh's root, step 1: trust a new root (generated, or --cacerts) beside the old one", toStdout(rootsAdd),
			[]string{"--state-dir", "--mesh", "--trust-domain", "--cacerts", "--ca-store", "--ca-namespace", "--kubeconfig"}},
		{"roots switch", "rotate a mesh's root, step 2: sign with the new root; the old one stays trusted", toStdout(rootsSwitch),
			[]string{"--state-dir", "--mesh", "--trust-domain", "--min-distribution", "--force", "--ca-store", "--ca-namespace", "--kubeconfig"}},
		{"roots drop", "rotate a mesh's root, step 3: stop trusting the previous root", toStdout(rootsDrop),
			[]string{"--state-dir", "--mesh", "--trust-domain", "--force", "--ca-store", "--ca-namespace", "--kubeconfig"}},
		{"roots status", "a mesh's roots and where a rotation stands", toStdout(rootsStatus),
			[]string{"--state-dir", "--mesh", "--trust-domain", "-o", "--ca-store", "--ca-namespace", "--kubeconfig"}},
		{"operator issue", "issue an operator's client certificate for the hub's operator admin listener", operatorIssue,
			append([]string{"--mesh", "--vendor", "--name", "--out", "--ttl"}, stateFlagNames...)},
		{"bootstrap", "write a VM's xDS bootstrap (Envoy or gRPC) as nave-agent writes a pod's",
			toStdout(func(_ context.Context, args []string, stdout io.Writer) error { return bootstrapCmd(args, stdout) }),
			[]string{"--kind", "--name", "--namespace", "--service-account", "--ip", "--mesh", "--cluster", "--labels",
				"--domain-suffix", "--hub", "--fallback", "--server-name", "--hub-ca", "--cert-dir", "--out"}},
	}
}

// newRoot builds the navectl command tree. Commands print to stdout and
// stderr; errors are returned to run, which prints them once and picks the
// exit code.
func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "navectl",
		Short: "administer a nave hub: enrollment, certificates, status, proxy config, offline analysis",
		Long:  strings.TrimSuffix(usage, "\n"),
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			return usageErr("no command")
		},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.SetContext(ctx)

	groups := map[string]*cobra.Command{}
	for _, lc := range legacyCommands() {
		parent := root
		words := strings.Fields(lc.path)
		for _, w := range words[:len(words)-1] {
			g := groups[w]
			if g == nil {
				g = newGroup(w)
				groups[w] = g
				root.AddCommand(g)
			}
			parent = g
		}
		parent.AddCommand(newLegacy(words[len(words)-1], lc, stdout, stderr))
	}
	for _, c := range []*cobra.Command{
		newStatusCmd(stdout),
		newProxyStatusCmd(stdout),
		newProxyConfigCmd(stdout),
		newAnalyzeCmd(stdout, stderr),
		newMeshCmd(stdout),
	} {
		root.AddCommand(c)
	}
	return root
}

// newGroup is a command that only holds subcommands ("token", "cluster").
func newGroup(name string) *cobra.Command {
	return &cobra.Command{
		Use:   name + " COMMAND",
		Short: name + " commands",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("%s: no subcommand", name)
			}
			return usageErr("unknown command %q", name+" "+args[0])
		},
	}
}

// newLegacy wraps a command that parses its own flags.
func newLegacy(name string, lc legacyCommand, stdout, stderr io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:                name + " [flags]",
		Short:              lc.short,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return lc.fn(cmd.Context(), args, stdout, stderr)
		},
		ValidArgsFunction: func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if !strings.HasPrefix(toComplete, "-") {
				return nil, cobra.ShellCompDirectiveDefault
			}
			var out []string
			for _, f := range lc.flags {
				if strings.HasPrefix(f, toComplete) {
					out = append(out, f)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
	}
}

// flagError reports a bad flag of a cobra-parsed command as a usage error,
// in the words the standard flag package uses for the older commands.
func flagError(cmd *cobra.Command, err error) error {
	var (
		notExist *pflag.NotExistError
		invalid  *pflag.InvalidValueError
	)
	switch {
	case errors.As(err, &notExist):
		return usageErr("%s: flag provided but not defined: --%s", cmd.CommandPath(), notExist.GetSpecifiedName())
	case errors.As(err, &invalid):
		return usageErr("%s: invalid value %q for flag --%s: %v", cmd.CommandPath(), invalid.GetValue(), invalid.GetFlag().Name, invalid.Unwrap())
	}
	return usageErr("%s: %v", cmd.CommandPath(), err)
}

// rangeArgs is an argument-count check that fail as usage errors.
func rangeArgs(minN, maxN int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < minN:
			return usageErr("%s: want %s", cmd.CommandPath(), what)
		case len(args) > maxN:
			return usageErr("%s: unexpected argument %q", cmd.CommandPath(), args[maxN])
		}
		return nil
	}
}
