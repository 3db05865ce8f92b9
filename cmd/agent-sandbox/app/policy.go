package app

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

func newPolicyCommand(streams IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Inspect and check agent-sandbox policies",
	}
	cmd.AddCommand(newPolicyCheckCommand(streams))
	return cmd
}

// policyCheckOptions are the inputs of `agent-sandbox policy check`.
type policyCheckOptions struct {
	Files []string
}

func newPolicyCheckCommand(streams IO) *cobra.Command {
	o := &policyCheckOptions{}
	return &cobra.Command{
		Use:   "check FILE...",
		Short: "Decode, validate and compile policy files; print every problem with its path",
		Long: `Decode a policy strictly (an unknown field is an error), validate it and compile its CEL
admission rules. Every problem is printed with its path in the document, e.g.
  spec.admissionRules[3].expression: ...
Exits 1 if any file has a problem. The webhook and the MCP server refuse such a policy too.`,
		Example: "  agent-sandbox policy check policy/policy.yaml",
		Args:    usage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Files = args
			return o.Run(streams)
		},
	}
}

// Run checks each file and reports on stdout (good) or stderr (problems).
func (o *policyCheckOptions) Run(streams IO) error {
	failed := 0
	for _, f := range o.Files {
		c, err := policy.LoadFile(f)
		if err != nil {
			failed++
			var pe *policy.Error
			if errors.As(err, &pe) {
				fmt.Fprintf(streams.ErrOut, "%s: %d problem(s):\n", f, len(pe.Problems))
				for _, p := range pe.Problems {
					fmt.Fprintf(streams.ErrOut, "  %s\n", p)
				}
			} else {
				fmt.Fprintf(streams.ErrOut, "%s: %v\n", f, err)
			}
			continue
		}
		fmt.Fprintf(streams.Out, "%s: OK (policy %q version %s: %d tools, %d scopes, %d admission rules, %d plan rules, %d destructive signals)\n",
			f, c.Metadata.Name, c.Version, len(c.Spec.Tools), len(c.Spec.Scopes), len(c.Spec.AdmissionRules), len(c.Spec.PlanRules), len(c.Spec.DestructiveSignals))
	}
	if failed > 0 {
		return exitError{code: 1}
	}
	return nil
}
