package gateway

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/gatewayline"
	"github.com/openshell/openshell-operator/internal/operatorenv"
	"github.com/openshell/openshell-operator/internal/preflight"
	"github.com/openshell/openshell-operator/internal/scheme"
)

// TestPlanVersion: a gateway moves to the release its spec asks for,
// except back from 0.1 to 0.0 or onto 0.1 where NetworkPolicy enforcement
// is not established; then it stays on what it runs, and a new one is not
// installed.
func TestPlanVersion(t *testing.T) {
	const legacy, current, later = gatewayline.LegacyManaged, gatewayline.DefaultManaged, "0.1.9"
	T, F, U := metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	for name, tc := range map[string]struct {
		running, target string
		enforced        metav1.ConditionStatus
		render, reason  string
		upgrading       bool
	}{
		"new 0.1 gateway":                         {"", current, T, current, "", false},
		"new 0.1 gateway, enforcement unknown":    {"", current, U, "", openshellv1alpha1.GatewayReasonNetworkPolicyNotEnforced, false},
		"new 0.1 gateway, enforcement absent":     {"", current, F, "", openshellv1alpha1.GatewayReasonNetworkPolicyNotEnforced, false},
		"new 0.0 gateway needs no enforcement":    {"", legacy, U, legacy, "", false},
		"0.0 to 0.1":                              {legacy, current, T, current, "", true},
		"0.0 to 0.1 held: enforcement unknown":    {legacy, current, U, legacy, openshellv1alpha1.GatewayReasonNetworkPolicyNotEnforced, false},
		"0.1 to a later 0.1":                      {current, later, T, later, "", true},
		"0.1 stays 0.1 if enforcement is revoked": {current, later, F, later, "", true},
		"0.1 back to 0.0 refused":                 {current, legacy, T, current, openshellv1alpha1.GatewayReasonDowngradeRefused, false},
		"at target":                               {current, current, T, current, "", false},
		"0.2 refused, 0.1 kept":                   {current, "0.2.0", T, current, openshellv1alpha1.GatewayReasonVersionNotSupported, false},
		"too old a 0.0":                           {"", "0.0.50", T, "", openshellv1alpha1.GatewayReasonVersionNotSupported, false},
	} {
		t.Run(name, func(t *testing.T) {
			p := planVersion(tc.running, tc.target, tc.enforced, false)
			reason := ""
			if p.Blocked != nil {
				reason = p.Blocked.Reason
			}
			if p.Render != tc.render || reason != tc.reason || p.Upgrading() != tc.upgrading {
				t.Fatalf("plan = render %q, blocked %q, upgrading %v; want %q, %q, %v", p.Render, reason, p.Upgrading(), tc.render, tc.reason, tc.upgrading)
			}
			st, why, msg := versionCondition(p)
			if want := tc.reason == "" && !tc.upgrading && tc.running != ""; (st == metav1.ConditionTrue) != want {
				t.Errorf("VersionCurrent = %s (%s: %s), want True=%v", st, why, msg, want)
			}
			if tc.reason != "" && why != tc.reason {
				t.Errorf("VersionCurrent reason %s, want %s", why, tc.reason)
			}
		})
	}
}

// TestPlanWithImages: a release the operator ships renders with its
// images; another needs spec.managed.images, complete for its line (0.1
// needs the sandbox runtime), and is otherwise held with a reason that
// says what to set.
func TestPlanWithImages(t *testing.T) {
	releases := operatorenv.Releases{
		Default: operatorenv.RelatedImages{Gateway: "gw:0.1", Supervisor: "sup:0.1", SandboxRuntime: "rt:0.1", Sandbox: "agent"},
		Legacy:  operatorenv.RelatedImages{Gateway: "gw:0.0", Supervisor: "sup:0.0", Sandbox: "agent:0.0"},
	}
	gw := func(version string, images openshellv1alpha1.GatewayImages) *openshellv1alpha1.OpenShellGateway {
		return &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{Version: version, Images: images}}}
	}
	for name, tc := range map[string]struct {
		gw             *openshellv1alpha1.OpenShellGateway
		releases       operatorenv.Releases
		running        string
		render, reason string
		mentions       string
	}{
		"default":                 {gw("", openshellv1alpha1.GatewayImages{}), releases, "", gatewayline.DefaultManaged, "", ""},
		"legacy":                  {gw(gatewayline.LegacyManaged, openshellv1alpha1.GatewayImages{}), releases, "", gatewayline.LegacyManaged, "", ""},
		"not shipped":             {gw("0.1.9", openshellv1alpha1.GatewayImages{}), releases, gatewayline.DefaultManaged, gatewayline.DefaultManaged, openshellv1alpha1.GatewayReasonVersionNotShipped, "spec.managed.images"},
		"not shipped, no runtime": {gw("0.1.9", openshellv1alpha1.GatewayImages{Gateway: "gw:0.1.9", Supervisor: "sup:0.1.9"}), releases, "", "", openshellv1alpha1.GatewayReasonVersionNotShipped, "sandboxRuntime"},
		"not shipped, overridden": {gw("0.1.9", openshellv1alpha1.GatewayImages{Gateway: "gw:0.1.9", Supervisor: "sup:0.1.9", SandboxRuntime: "rt:0.1.9"}), releases, "", "0.1.9", "", ""},
		"operator lacks its own":  {gw("", openshellv1alpha1.GatewayImages{}), operatorenv.Releases{Legacy: releases.Legacy}, gatewayline.LegacyManaged, gatewayline.LegacyManaged, openshellv1alpha1.GatewayReasonRelatedImagesMissing, "RELATED_IMAGE_"},
	} {
		t.Run(name, func(t *testing.T) {
			target := tc.gw.Spec.Managed.Version
			if target == "" {
				target = gatewayline.DefaultManaged
			}
			p := planVersion(tc.running, target, metav1.ConditionTrue, false).withImages(tc.gw, tc.releases)
			reason, msg := "", ""
			if p.Blocked != nil {
				reason, msg = p.Blocked.Reason, p.Blocked.Message
			}
			if p.Render != tc.render || reason != tc.reason || !strings.Contains(msg, tc.mentions) {
				t.Fatalf("plan = render %q, blocked %q (%s); want %q, %q mentioning %q", p.Render, reason, msg, tc.render, tc.reason, tc.mentions)
			}
		})
	}
}

// TestHoldForProviders: a 0.0.x gateway moving to 0.1 is held while
// sandboxes on it attach providers whose profile nobody declared (0.1
// has no built-in profiles); without them, or between 0.1 releases,
// nothing is held.
func TestHoldForProviders(t *testing.T) {
	up := planVersion(gatewayline.LegacyManaged, gatewayline.DefaultManaged, metav1.ConditionTrue, false)
	if !up.crossesToV01() {
		t.Fatal("0.0.111 -> 0.1.5 does not cross to 0.1")
	}
	held := up.holdForProviders([]string{"team-a/anthropic (claude-code)"})
	if held.Render != gatewayline.LegacyManaged || held.Blocked == nil || held.Blocked.Reason != openshellv1alpha1.GatewayReasonProviderProfilesRequired ||
		!strings.Contains(held.Blocked.Message, "team-a/anthropic (claude-code)") || !strings.Contains(held.Blocked.Message, "OpenShellProviderProfile") {
		t.Fatalf("held = %+v %+v", held, held.Blocked)
	}
	if p := up.holdForProviders(nil); p.Blocked != nil || p.Render != gatewayline.DefaultManaged {
		t.Fatalf("no providers: %+v", p)
	}
	for name, p := range map[string]versionPlan{
		"0.1 to 0.1":      planVersion(gatewayline.DefaultManaged, "0.1.9", metav1.ConditionTrue, false),
		"new 0.1 gateway": planVersion("", gatewayline.DefaultManaged, metav1.ConditionTrue, false),
		"already held":    planVersion(gatewayline.LegacyManaged, gatewayline.DefaultManaged, metav1.ConditionUnknown, false),
	} {
		if p.crossesToV01() {
			t.Errorf("%s: crosses to 0.1", name)
		}
	}
}

// TestManualUpgradePolicy: an unpinned gateway with upgradePolicy Manual
// installs the operator's default, then stays on what it runs when the
// default moves (an operator upgrade), with VersionCurrent True reason
// UpgradeAvailable naming the default; Automatic moves it; a release the
// operator no longer ships images for leaves its objects as they are, and
// says how to move on.
func TestManualUpgradePolicy(t *testing.T) {
	const legacy, current, older = gatewayline.LegacyManaged, gatewayline.DefaultManaged, "0.1.4"
	for name, tc := range map[string]struct {
		running           string
		manual            bool
		render, available string
		status            metav1.ConditionStatus
		reason            string
	}{
		"new gateway gets the default":        {"", true, current, "", metav1.ConditionFalse, openshellv1alpha1.GatewayReasonInstalling},
		"at the default":                      {current, true, current, "", metav1.ConditionTrue, openshellv1alpha1.GatewayReasonAtTarget},
		"0.0.111 kept, 0.1 available":         {legacy, true, legacy, current, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonUpgradeAvailable},
		"an older 0.1 kept":                   {older, true, older, current, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonUpgradeAvailable},
		"Automatic moves":                     {legacy, false, current, "", metav1.ConditionFalse, openshellv1alpha1.GatewayReasonUpgrading},
		"Manual needs no NetworkPolicy check": {legacy, true, legacy, current, metav1.ConditionTrue, openshellv1alpha1.GatewayReasonUpgradeAvailable},
	} {
		t.Run(name, func(t *testing.T) {
			p := planVersion(tc.running, current, metav1.ConditionTrue, tc.manual)
			if p.Render != tc.render || p.Available != tc.available || p.Blocked != nil {
				t.Fatalf("plan = %+v, want render %s, available %q", p, tc.render, tc.available)
			}
			st, reason, msg := versionCondition(p)
			if st != tc.status || reason != tc.reason {
				t.Fatalf("VersionCurrent = %s %s (%s), want %s %s", st, reason, msg, tc.status, tc.reason)
			}
			if tc.available != "" && (!strings.Contains(msg, "spec.managed.version to "+current) || !strings.Contains(msg, "Automatic")) {
				t.Errorf("message %q does not say how to move", msg)
			}
		})
	}
	releases := operatorenv.Releases{
		Default: operatorenv.RelatedImages{Gateway: "gw:0.1", Supervisor: "sup:0.1", SandboxRuntime: "rt:0.1"},
		Legacy:  operatorenv.RelatedImages{Gateway: "gw:0.0", Supervisor: "sup:0.0"},
	}
	gw := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{Managed: &openshellv1alpha1.ManagedGatewaySpec{}}}
	if !followsNoDefault(gw) {
		t.Error("an unpinned gateway without upgradePolicy follows the default by itself")
	}
	p := planVersion(older, current, metav1.ConditionTrue, true).withImages(gw, releases)
	if p.Blocked == nil || p.Blocked.Reason != openshellv1alpha1.GatewayReasonVersionNotShipped || p.Render != older ||
		!strings.Contains(p.Blocked.Message, "left as they are") || !strings.Contains(p.Blocked.Message, current) {
		t.Fatalf("held on a release without images: %+v %+v", p, p.Blocked)
	}
	if p := planVersion(legacy, current, metav1.ConditionTrue, true).withImages(gw, releases); p.Blocked != nil || p.Render != legacy {
		t.Fatalf("held on 0.0.111, which the operator ships: %+v %+v", p, p.Blocked)
	}
	gw.Spec.Managed.UpgradePolicy = openshellv1alpha1.UpgradePolicyAutomatic
	if followsNoDefault(gw) {
		t.Error("Automatic does not follow the default")
	}
	gw.Spec.Managed.UpgradePolicy, gw.Spec.Managed.Version = "", current
	if followsNoDefault(gw) {
		t.Error("a pinned gateway counts as unpinned")
	}
	// A Managed gateway stored without spec.managed (the CRD allows it) is
	// unpinned with the default policy, Manual: it stays on 0.0.111 where
	// NetworkPolicy is enforced, instead of following the default (and
	// dereferencing the missing spec.managed on the way).
	bare := &openshellv1alpha1.OpenShellGateway{Spec: openshellv1alpha1.OpenShellGatewaySpec{Mode: openshellv1alpha1.GatewayModeManaged},
		Status: openshellv1alpha1.OpenShellGatewayStatus{Version: legacy}}
	if !followsNoDefault(bare) {
		t.Error("a gateway without spec.managed follows the default by itself")
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).Build()}
	p, err := r.planManaged(context.Background(), bare, preflight.Result{NetworkType: "OVNKubernetes"})
	if err != nil || p.Render != legacy || p.Available != current {
		t.Fatalf("plan of a gateway without spec.managed = %+v, %v; want %s kept, %s available", p, err, legacy, current)
	}
}

// TestReplaces: the release rendering replaces is the one the pods run
// while they move, none when they run the release or before the first
// install.
func TestReplaces(t *testing.T) {
	for _, tc := range []struct{ running, render, want string }{
		{"", gatewayline.DefaultManaged, ""},
		{gatewayline.DefaultManaged, gatewayline.DefaultManaged, ""},
		{gatewayline.LegacyManaged, gatewayline.DefaultManaged, gatewayline.LegacyManaged},
	} {
		if got := (versionPlan{Running: tc.running, Render: tc.render}).replaces(); got != tc.want {
			t.Errorf("running %q, rendering %q: replaces %q, want %q", tc.running, tc.render, got, tc.want)
		}
	}
}
