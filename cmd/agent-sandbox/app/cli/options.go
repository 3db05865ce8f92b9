package cli

import (
	"context"

	"github.com/spf13/cobra"
)

// Options are a command's flags and what it does with them, in the three steps every agent-sandbox command
// takes: Complete fills in the defaults, Validate checks what the command line asked for, Run does it.
type Options interface {
	Complete() error
	Validate() error
	Run(ctx context.Context) error
}

// RunE is the RunE of a command whose options are o: Complete, Validate and Run, in that order, stopping at
// the first error. An error of Validate is a UsageError (exit 2): the command line asked for what the
// command cannot do.
func RunE(o Options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := o.Complete(); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return UsageError{err}
		}
		return o.Run(cmd.Context())
	}
}
