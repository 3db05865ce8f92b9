package toolrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// planJSON is the part of `terraform show -json <planfile>` the runner reads.
type planJSON struct {
	FormatVersion   string `json:"format_version"`
	ResourceChanges []struct {
		Address      string `json:"address"`
		Mode         string `json:"mode"`
		Type         string `json:"type"`
		Name         string `json:"name"`
		ActionReason string `json:"action_reason"`
		Change       struct {
			Actions      []string `json:"actions"`
			ReplacePaths [][]any  `json:"replace_paths"`
		} `json:"change"`
	} `json:"resource_changes"`
	OutputChanges map[string]struct {
		Actions []string `json:"actions"`
	} `json:"output_changes"`
}

// PlanChanges is what ParsePlanJSON reads from a plan.
type PlanChanges struct {
	Summary PlanSummary
	// Changes are the resources with an action other than no-op, in Terraform's order.
	Changes []ResourceChange
	// NoChanges is true when no managed resource and no output changes.
	NoChanges bool
	// JSON is the whole `terraform show -json` document it was read from: the planned values before and
	// after, for the approver's diff and the policy's plan rules (package plandiff).
	JSON []byte
}

// ParsePlanJSON summarises the output of `terraform show -json <planfile>`. Only managed resources count
// towards the summary; data sources that must be read during apply are listed with action "read".
func ParsePlanJSON(data []byte) (PlanChanges, error) {
	var p planJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	// Attribute paths mix names and list indexes; keep indexes as the integers they are.
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return PlanChanges{}, fmt.Errorf("decode terraform show -json: %w", err)
	}
	if p.FormatVersion == "" {
		return PlanChanges{}, fmt.Errorf("decode terraform show -json: no format_version: not a plan")
	}
	res := PlanChanges{Changes: []ResourceChange{}, JSON: data}
	changed := false
	for _, rc := range p.ResourceChanges {
		acts := rc.Change.Actions
		if len(acts) == 0 || (len(acts) == 1 && acts[0] == "no-op") {
			continue
		}
		replace := slices.Contains(acts, "delete") && slices.Contains(acts, "create")
		res.Changes = append(res.Changes, ResourceChange{
			Address: rc.Address, Type: rc.Type, Name: rc.Name,
			Actions: acts, Replace: replace, ReplacePaths: rc.Change.ReplacePaths,
			ActionReason: rc.ActionReason,
		})
		if rc.Mode != "" && rc.Mode != "managed" {
			continue
		}
		changed = true
		switch {
		case replace:
			res.Summary.Add++
			res.Summary.Destroy++
			res.Summary.Replace++
		case slices.Contains(acts, "create"):
			res.Summary.Add++
		case slices.Contains(acts, "delete"):
			res.Summary.Destroy++
		case slices.Contains(acts, "update"):
			res.Summary.Change++
		}
	}
	for _, oc := range p.OutputChanges {
		if !(len(oc.Actions) == 1 && oc.Actions[0] == "no-op") {
			changed = true
		}
	}
	res.NoChanges = !changed
	return res, nil
}
