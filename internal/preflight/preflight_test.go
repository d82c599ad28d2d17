package preflight

import (
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSelectVersion(t *testing.T) {
	for name, tt := range map[string]struct {
		served []string
		want   string
		ok     bool
	}{
		"alpha only (<= v0.4.6)":  {[]string{"v1alpha1"}, "v1alpha1", true},
		"alpha and beta (v0.5.x)": {[]string{"v1alpha1", "v1beta1"}, "v1beta1", true},
		"beta only (v1.0.x)":      {[]string{"v1beta1"}, "v1beta1", true},
		"beta first in list":      {[]string{"v1beta1", "v1alpha1"}, "v1beta1", true},
		"future v1 only":          {[]string{"v1"}, "", false},
		"nothing served":          {nil, "", false},
		"future v1 and beta":      {[]string{"v1", "v1beta1"}, "v1beta1", true},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := SelectVersion(tt.served)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("SelectVersion(%v) = %q, %v; want %q, %v", tt.served, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func crd(established bool, conversion apiextensionsv1.ConversionStrategyType, versions ...apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: AgentSandboxCRD},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Versions:   versions,
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: conversion},
		},
	}
	st := apiextensionsv1.ConditionFalse
	if established {
		st = apiextensionsv1.ConditionTrue
	}
	c.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: st}}
	return c
}

func ver(name string, served bool) apiextensionsv1.CustomResourceDefinitionVersion {
	return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: served}
}

func TestEvaluateAgentSandbox(t *testing.T) {
	deleting := crd(true, apiextensionsv1.NoneConverter, ver("v1beta1", true))
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	for name, tt := range map[string]struct {
		crd        *apiextensionsv1.CustomResourceDefinition
		available  bool
		reason     string
		preferred  string
		served     []string
		webhook    bool
		msgContain string
	}{
		"absent": {nil, false, ReasonCRDNotFound, "", nil, false, "install the Agent Sandbox controller"},
		"not established": {crd(false, apiextensionsv1.NoneConverter, ver("v1beta1", true)),
			false, ReasonCRDNotEstablished, "", []string{"v1beta1"}, false, "not Established"},
		"being deleted": {deleting, false, ReasonCRDNotEstablished, "", []string{"v1beta1"}, false, "being deleted"},
		"alpha only": {crd(true, apiextensionsv1.NoneConverter, ver("v1alpha1", true)),
			true, ReasonAvailable, "v1alpha1", []string{"v1alpha1"}, false, "agents.x-k8s.io/v1alpha1 served"},
		"alpha and beta with webhook": {crd(true, apiextensionsv1.WebhookConverter, ver("v1alpha1", true), ver("v1beta1", true)),
			true, ReasonAvailable, "v1beta1", []string{"v1alpha1", "v1beta1"}, true, "conversion webhook"},
		"beta only": {crd(true, apiextensionsv1.NoneConverter, ver("v1beta1", true)),
			true, ReasonAvailable, "v1beta1", []string{"v1beta1"}, false, "served versions: v1beta1"},
		"beta defined but not served": {crd(true, apiextensionsv1.NoneConverter, ver("v1alpha1", true), ver("v1beta1", false)),
			true, ReasonAvailable, "v1alpha1", []string{"v1alpha1"}, false, "v1alpha1"},
		"unsupported version": {crd(true, apiextensionsv1.NoneConverter, ver("v2", true)),
			false, ReasonNoSupportedVersion, "", []string{"v2"}, false, "serves v2; the operator needs v1beta1 or v1alpha1"},
		"nothing served": {crd(true, apiextensionsv1.NoneConverter, ver("v1beta1", false)),
			false, ReasonNoSupportedVersion, "", nil, false, "serves none"},
	} {
		t.Run(name, func(t *testing.T) {
			got := EvaluateAgentSandbox(tt.crd)
			if got.Available != tt.available || got.Reason != tt.reason || got.Preferred != tt.preferred ||
				!slices.Equal(got.Served, tt.served) || got.ConversionWebhook != tt.webhook {
				t.Fatalf("EvaluateAgentSandbox = %+v", got)
			}
			if !strings.Contains(got.Message, tt.msgContain) {
				t.Fatalf("message %q does not contain %q", got.Message, tt.msgContain)
			}
		})
	}
}

func TestEvaluateKubernetesVersion(t *testing.T) {
	for in, want := range map[string]bool{
		"v1.34.4":               true,
		"v1.31.0":               true,
		"v1.30.14":              false,
		"v1.34.4+rhos":          true,
		"v1.31.2-eks-1234":      true,
		"v1.30.2-eks-1234":      false,
		"not-a-version":         false,
		"v0.0.0-master+$Format": false,
	} {
		if got := EvaluateKubernetesVersion(in); got.Supported != want {
			t.Errorf("EvaluateKubernetesVersion(%q).Supported = %v (%s), want %v", in, got.Supported, got.Message, want)
		}
	}
}

func TestStoreTransitions(t *testing.T) {
	s := NewStore()
	ch := s.Subscribe()
	if _, ok := s.Get(); ok {
		t.Fatal("empty store reports a result")
	}
	r := Result{Kubernetes: KubernetesVersion{Supported: true}}
	if ts, changed := s.Set(r); !changed || len(ts) != 0 {
		t.Fatalf("first Set: transitions %v changed %v, want none and true", ts, changed)
	}
	<-ch
	if _, changed := s.Set(r); changed {
		t.Fatal("identical Set reported a change")
	}
	select {
	case <-ch:
		t.Fatal("identical Set notified subscribers")
	default:
	}
	r.AgentSandbox = AgentSandbox{Available: true, Preferred: "v1beta1", Served: []string{"v1beta1"}}
	r.Route = true
	ts, changed := s.Set(r)
	want := []Transition{{"AgentSandbox", true}, {"Route", true}}
	if !changed || !slices.Equal(ts, want) {
		t.Fatalf("transitions = %v, want %v", ts, want)
	}
	// Two changes before the subscriber drains collapse into one pending event.
	r.AgentSandbox.Served = []string{"v1alpha1", "v1beta1"}
	s.Set(r)
	<-ch
	select {
	case <-ch:
		t.Fatal("more than one pending notification")
	default:
	}
}

func TestGatewayConditions(t *testing.T) {
	pending := GatewayConditions(Result{}, false)
	for _, c := range pending {
		if c.Status != metav1.ConditionUnknown || c.Reason != ReasonPreflightPending {
			t.Fatalf("before the first probe %s = %s/%s, want Unknown/PreflightPending", c.Type, c.Status, c.Reason)
		}
	}
	vanilla := GatewayConditions(Result{AgentSandbox: EvaluateAgentSandbox(nil),
		Kubernetes: EvaluateKubernetesVersion("v1.28.0")}, true)
	got := map[string]Condition{}
	for _, c := range vanilla {
		got[c.Type] = c
	}
	for typ, reason := range map[string]string{
		ConditionAgentSandboxAvailable:      ReasonCRDNotFound,
		ConditionCertManagerAvailable:       ReasonNotInstalled,
		ConditionRouteAPIAvailable:          ReasonNotOpenShift,
		ConditionKubernetesVersionSupported: ReasonTooOld,
	} {
		if got[typ].Status != metav1.ConditionFalse || got[typ].Reason != reason {
			t.Errorf("%s = %s/%s, want False/%s", typ, got[typ].Status, got[typ].Reason, reason)
		}
	}
	if blocked, msg := Blocking(Result{AgentSandbox: EvaluateAgentSandbox(nil)}, true); !blocked || !strings.Contains(msg, AgentSandboxCRD) {
		t.Errorf("Blocking without CRD = %v %q", blocked, msg)
	}
}

// TestOnOpenShiftNamesTheSubscription: on OpenShift a missing or
// unsupported Agent Sandbox is answered with the OLM package to subscribe
// to, not the upstream manifests.
func TestOnOpenShiftNamesTheSubscription(t *testing.T) {
	for name, as := range map[string]AgentSandbox{
		"absent":      EvaluateAgentSandbox(nil),
		"unsupported": EvaluateAgentSandbox(crd(true, apiextensionsv1.NoneConverter, ver("v2", true))),
	} {
		msg := onOpenShift(as)
		for _, want := range []string{"agent-sandbox-operator", "preview-0.9", "redhat-operators", "openshift-marketplace", AgentSandboxCRD} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not name %s", name, msg, want)
			}
		}
		if strings.Contains(msg, "kubernetes-sigs") || strings.Contains(msg, "v0.4.x") {
			t.Errorf("%s: %q still points at the upstream manifests", name, msg)
		}
	}
}
