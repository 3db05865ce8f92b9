package corpus

import (
	"strings"
	"testing"
)

// TestParseReplicaCounts reads the two counters an approval race moves out of a replica's exposition, and
// nothing else: other rules, kinds, operations and results are not counted.
func TestParseReplicaCounts(t *testing.T) {
	text := `# HELP agent_sandbox_approvals_total Approval tokens accepted at admission.
# TYPE agent_sandbox_approvals_total counter
agent_sandbox_approvals_total{result="consumed"} 3
agent_sandbox_approvals_total{result="dry-run"} 7
# HELP agent_sandbox_admission_decisions_total Admission decisions.
# TYPE agent_sandbox_admission_decisions_total counter
agent_sandbox_admission_decisions_total{decision="denied",kind="Job",operation="CREATE",rule="approval"} 14
agent_sandbox_admission_decisions_total{decision="denied",kind="Job",operation="CREATE",rule="exact-command"} 100
agent_sandbox_admission_decisions_total{decision="denied",kind="Pod",operation="CREATE",rule="approval"} 5
agent_sandbox_admission_decisions_total{decision="allowed",kind="Job",operation="CREATE",rule=""} 9
`
	c, err := parseReplicaCounts(strings.NewReader(text))
	if err != nil || c.Consumed != 3 || c.Refused != 14 {
		t.Fatalf("got %+v, %v; want consumed 3, refused 14", c, err)
	}
	if _, err := parseReplicaCounts(strings.NewReader("agent_sandbox_approvals_total{result=\"consumed\" 3\n")); err == nil {
		t.Fatal("a broken exposition was read")
	}
}

// TestRaceRoundBoth: a round counts as reaching both replicas only when each decided at least one Job.
func TestRaceRoundBoth(t *testing.T) {
	one := RaceRound{Admitted: 1, Replicas: map[string]ReplicaCounts{"a": {Consumed: 1, Refused: 7}, "b": {}}}
	two := RaceRound{Admitted: 1, Replicas: map[string]ReplicaCounts{"a": {Refused: 3}, "b": {Consumed: 1, Refused: 4}}}
	if one.Both() || !two.Both() {
		t.Fatalf("Both: one replica %v, two replicas %v", one.Both(), two.Both())
	}
	if s := two.String(); s != "1 admitted; a consumed 0, refused 3; b consumed 1, refused 4" {
		t.Fatalf("String: %q", s)
	}
}
