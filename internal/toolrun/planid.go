package toolrun

import (
	"errors"
	"fmt"

	"github.com/agent-sandbox/agent-sandbox/internal/sha256hex"
)

// MaxPlanSize keeps a saved plan within what its ConfigMap can hold (1 MiB, less the metadata). The plan
// travels from the plan Job to the MCP server in the tool's result and is stored, immutable and named by
// its SHA-256, in the sandbox namespace; the apply Job mounts it.
const MaxPlanSize = 1<<20 - 16<<10

// ErrPlanMismatch means the saved plan's bytes do not hash to the plan ID the apply was approved for.
var ErrPlanMismatch = errors.New("saved plan does not match the approved plan id")

// PlanID is the lowercase hex SHA-256 of a saved plan file.
func PlanID(plan []byte) string {
	return sha256hex.Of(plan)
}

// ValidatePlanID checks that id is 64 lowercase hex digits.
func ValidatePlanID(id string) error {
	if !sha256hex.Valid(id) {
		return fmt.Errorf("plan id %q: want 64 lowercase hex digits (a SHA-256)", id)
	}
	return nil
}
