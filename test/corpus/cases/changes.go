package cases

import (
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Immutable is the rule that refuses every change below: nothing about an admitted Job or its Pod
// changes after admission but the API server's and the controllers' bookkeeping.
const Immutable = "immutable"

// JobChange is a change to an admitted Job: a PATCH of type Patch with Body or, with no Patch, an UPDATE
// of the Job as read, changed by Update. It must be refused as Immutable.
type JobChange struct {
	Name   string
	Patch  types.PatchType
	Body   string
	Update func(*batchv1.Job)
}

// PodChange is a PATCH of an admitted Job's Pod, of type Patch with Body. It must be refused as Immutable.
type PodChange struct {
	Name  string
	Patch types.PatchType
	Body  string
}

// JobChanges are the changes to an admitted Job, with every kind of patch and an update.
func JobChanges() []JobChange {
	return []JobChange{
		{Name: "PATCH an admitted Job's parallelism (strategic merge)", Patch: types.StrategicMergePatchType, Body: `{"spec":{"parallelism":5}}`},
		{Name: "PATCH an admitted Job to suspend it (merge patch; resuming makes a new Pod)", Patch: types.MergePatchType, Body: `{"spec":{"suspend":true}}`},
		{Name: "PATCH an admitted Job's deadline (JSON patch)", Patch: types.JSONPatchType, Body: `[{"op":"replace","path":"/spec/activeDeadlineSeconds","value":900}]`},
		{Name: "PATCH an admitted Job's ttlSecondsAfterFinished", Patch: types.MergePatchType, Body: `{"spec":{"ttlSecondsAfterFinished":31536000}}`},
		{Name: "PATCH an admitted Job's tool label", Patch: types.MergePatchType, Body: `{"metadata":{"labels":{"agent-sandbox.dev/tool":"terraform_apply"}}}`},
		{Name: "PATCH an admitted Job's parameters annotation", Patch: types.MergePatchType,
			Body: `{"metadata":{"annotations":{"agent-sandbox.dev/params":"{\"namespace\":\"kube-system\"}"}}}`},
		{Name: "PATCH a finalizer onto an admitted Job", Patch: types.MergePatchType, Body: `{"metadata":{"finalizers":["example.com/keep"]}}`},
		{Name: "PATCH an owner reference onto an admitted Job", Patch: types.MergePatchType,
			Body: `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"00000000-0000-4000-8000-000000000000"}]}}`},
		{Name: "UPDATE an admitted Job's labels", Update: func(j *batchv1.Job) { j.Labels["app"] = "web" }},
	}
}

// PodChanges are the changes to an admitted Job's Pod.
func PodChanges() []PodChange {
	return []PodChange{
		{Name: "PATCH a sandbox Pod's image", Patch: types.StrategicMergePatchType,
			Body: `{"spec":{"containers":[{"name":"tool","image":"localhost/busybox:agent-sandbox"}]}}`},
		{Name: "PATCH a toleration onto a sandbox Pod", Patch: types.JSONPatchType, Body: `[{"op":"add","path":"/spec/tolerations/-","value":{"operator":"Exists"}}]`},
		{Name: "PATCH a sandbox Pod's parameters annotation", Patch: types.MergePatchType, Body: `{"metadata":{"annotations":{"agent-sandbox.dev/params":"{}"}}}`},
		{Name: "PATCH a label onto a sandbox Pod", Patch: types.MergePatchType, Body: `{"metadata":{"labels":{"app":"web"}}}`},
		// The API server lets a Pod's deadline be set once, or shortened; the webhook lets neither happen.
		{Name: "PATCH a deadline onto a sandbox Pod", Patch: types.MergePatchType, Body: `{"spec":{"activeDeadlineSeconds":9999}}`},
		// A strategic merge adds to the Pod's finalizers; the garbage collector would then orphan what it owns.
		{Name: "PATCH the orphan finalizer onto a sandbox Pod", Patch: types.StrategicMergePatchType, Body: `{"metadata":{"finalizers":["orphan"]}}`},
	}
}
