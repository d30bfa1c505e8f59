package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// toolTimeout bounds one navectl run.
const toolTimeout = 30 * time.Second

// secureSetup does, with navectl on the running hub's state directory, what an operator
// does before a spoke and a workload join the mesh: a one-time join token for the spoke's
// (mesh, cluster), written to s.tokenFile; the pin of the hub's serving CA, which it
// returns for the spoke's --hub.ca-hash; and a workload certificate for the client in
// s.clientCerts. It reports each step on stdout; navectl's notes go to stderr.
func secureSetup(ctx context.Context, s *security, o options, stdout, stderr io.Writer) (pin string, err error) {
	token, err := runTool(ctx, stderr, "navectl token create", s.navectl, "token", "create", "--state-dir", s.hubState,
		"--mesh", o.mesh, "--cluster", o.cluster)
	if err != nil {
		return "", err
	}
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, " \n") {
		return "", errors.New("navectl token create printed no token")
	}
	if err := os.WriteFile(s.tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the join token: %w", err)
	}
	fmt.Fprintf(stdout, "nave-demo: join token for %s/%s in %s (navectl token create)\n", o.mesh, o.cluster, s.tokenFile)

	pins, err := runTool(ctx, stderr, "navectl ca-hash", s.navectl, "ca-hash", s.hubCA)
	if err != nil {
		return "", err
	}
	// One line per CA certificate in the file; the serving CA's file holds one.
	pin, _, _ = strings.Cut(strings.TrimSpace(pins), "\n")
	if !strings.HasPrefix(pin, "sha256:") {
		return "", fmt.Errorf("navectl ca-hash %s printed %q, want a sha256: pin", s.hubCA, pins)
	}
	fmt.Fprintf(stdout, "nave-demo: hub serving CA %s, pin %s (navectl ca-hash)\n", s.hubCA, pin)

	issued, err := runTool(ctx, stderr, "navectl cert issue", s.navectl, "cert", "issue", "--state-dir", s.hubState,
		"--mesh", o.mesh, "--trust-domain", trustDomain,
		"--namespace", clientNamespace, "--service-account", clientServiceAccount, "--out", s.clientCerts)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "nave-demo: client certificate: %s (navectl cert issue)\n", strings.TrimSpace(issued))
	return pin, nil
}

// runTool runs the command path args to completion and returns its standard output. Its
// standard error goes to stderr when it succeeds, and into the error, which starts with
// step, when it fails.
func runTool(ctx context.Context, stderr io.Writer, step, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", step, err, strings.TrimSpace(errOut.String()))
	}
	if _, err := errOut.WriteTo(stderr); err != nil {
		return "", err
	}
	return out.String(), nil
}

// removeState removes what an earlier run of the demo left in the work directory (the
// hub's CAs and enrollment state, the spoke's credentials, the join token and the client
// certificate), so that every run enrolls afresh.
func removeState(s *security) error {
	for _, p := range s.stateDirs() {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove the last run's state: %w", err)
		}
	}
	return nil
}
