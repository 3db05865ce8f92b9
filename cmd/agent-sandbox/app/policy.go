package app

import "github.com/spf13/cobra"

// newPolicyCommand is a placeholder until the command lands.
func newPolicyCommand(_ IO) *cobra.Command {
	return &cobra.Command{Use: "newPolicyCommand", Hidden: true}
}
