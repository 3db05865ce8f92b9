package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// OutputFlag is -o for the commands that print either a table for people or JSON for scripts.
type OutputFlag struct{ Output string }

// Bind adds -o to cmd.
func (f *OutputFlag) Bind(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.Output, "output", "o", "text", "output format: text or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]cobra.Completion{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

// Validate accepts text and json.
func (f *OutputFlag) Validate() error {
	if f.Output != "text" && f.Output != "json" {
		return fmt.Errorf("-o %q: want text or json", f.Output)
	}
	return nil
}

// JSON says whether -o json was asked for.
func (f *OutputFlag) JSON() bool { return f.Output == "json" }

// WriteJSON writes v as indented JSON and a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
