package corpus

import "fmt"

// Incident is issue 21's attack, the harmful plan "incident" (test/corpus/harmful/incident): the demo's
// web Deployment privileged, as root, with a node directory mounted and a command that prints a key from
// it reversed. The end-to-end and integration replays use it as the corpus does.
func Incident() (HarmfulPlan, error) {
	all, err := HarmfulPlans()
	if err != nil {
		return HarmfulPlan{}, err
	}
	for _, h := range all {
		if h.Name == "incident" {
			return h, nil
		}
	}
	return HarmfulPlan{}, fmt.Errorf("the harmful-plan corpus has no case \"incident\"")
}
