package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	openshellv1alpha1 "github.com/openshell/openshell-operator/api/v1alpha1"
	"github.com/openshell/openshell-operator/internal/sandboxspec"
	"github.com/openshell/openshell-operator/test/framework"
	"github.com/openshell/openshell-operator/test/stack"
)

// Secret attack sizes, from the third security read (N9): 128 Secrets of
// about 0.9 MiB each, and sandboxes whose env names them; the padded shape
// is re-queued attackRounds times.
const (
	attackSecrets     = 128
	attackSecretBytes = 900 << 10
	attackSandboxes   = 8
	attackRounds      = 10
)

// measureSecretAttack is a tenant trying to make the operator hold its
// Secrets in memory: attackSecrets Secrets of attackSecretBytes, then
// attackSandboxes sandboxes whose env names all of them (refused before any
// is read) and as many naming the most one sandbox may, each Secret larger
// than a sandbox's whole environment (refused after the first read). The
// operator reads env Secrets one at a time, uncached; its peak RSS should
// stay far below its 1 GiB limit (config/manager).
func measureSecretAttack(ctx context.Context, cluster *framework.Cluster, st *stack.Stack) ([]FootprintResult, error) {
	c := cluster.Client
	objects := fmt.Sprintf("a tenant's %d Secrets of %d KiB; %d sandboxes naming all, %d naming %d each",
		attackSecrets, attackSecretBytes>>10, attackSandboxes, attackSandboxes, sandboxspec.MaxEnvSecrets)
	before, err := footprint(cluster, st, "before the tenant's Secrets", objects)
	if err != nil || before == nil {
		return nil, err
	}
	const ns = "bench-tenant-secrets"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return nil, err
	}
	defer func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) }()
	if err := createAttackSecrets(ctx, c, ns); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, newBenchPolicy(ns)); err != nil {
		return nil, err
	}
	// Where the webhook runs it refuses the first half at admission (too
	// many Secrets); the operator refuses whatever it admits, reading at
	// most one Secret per sandbox.
	var names []string
	atAdmission := 0
	for i := range 2 * attackSandboxes {
		n := attackSecrets // the first half names every Secret
		if i >= attackSandboxes {
			n = sandboxspec.MaxEnvSecrets
		}
		sb := attackSandbox(st, ns, i, n)
		switch err := c.Create(ctx, sb); {
		case err != nil && strings.Contains(err.Error(), "TooManySecrets"):
			atAdmission++
		case err != nil:
			return nil, fmt.Errorf("create sandbox %s: %w", sb.Name, err)
		default:
			names = append(names, sb.Name)
		}
	}
	if err := waitRefused(ctx, c, ns, names); err != nil {
		return nil, err
	}
	after, err := footprint(cluster, st, fmt.Sprintf("after the sandboxes naming them (%d refused at admission, %d by the operator)",
		atAdmission, len(names)), objects)
	if err != nil {
		return nil, err
	}
	padded, err := measurePaddedSecrets(ctx, cluster, st, ns)
	if err != nil {
		return nil, err
	}
	return []FootprintResult{*before, *after, *padded}, nil
}

// measurePaddedSecrets is the review's exact shape: each Secret holds a
// tiny key k, which env names, beside about 0.9 MiB of padding, so that
// nothing is too large and every sandbox goes Ready; every read still
// fetches the whole Secret. attackSandboxes sandboxes name
// sandboxspec.MaxEnvSecrets of them each, and the namespace is re-queued
// attackRounds times, each round waiting until every sandbox has been
// reconciled again (the review re-queued with an image-policy annotation;
// a namespace label fans out to the same reconciles without changing what
// the sandboxes may run).
func measurePaddedSecrets(ctx context.Context, cluster *framework.Cluster, st *stack.Stack, ns string) (*FootprintResult, error) {
	c := cluster.Client
	pad := []byte(strings.Repeat("p", attackSecretBytes))
	if err := inParallel(attackSecrets, 4, func(i int) error {
		return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("padded-%d", i), Namespace: ns},
			Data: map[string][]byte{"k": []byte("v"), "pad": pad}})
	}); err != nil {
		return nil, fmt.Errorf("create the padded Secrets: %w", err)
	}
	var names []string
	for i := range attackSandboxes {
		sb := attackSandbox(st, ns, i, sandboxspec.MaxEnvSecrets)
		sb.Name = fmt.Sprintf("padded-%d", i)
		for j := range sb.Spec.Env {
			sb.Spec.Env[j].ValueFrom.SecretKeyRef = openshellv1alpha1.SecretKeyReference{
				Name: fmt.Sprintf("padded-%d", (i*sandboxspec.MaxEnvSecrets+j)%attackSecrets), Key: "k"}
		}
		if err := c.Create(ctx, sb); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", sb.Name, err)
		}
		names = append(names, sb.Name)
	}
	if err := waitPhase(ctx, c, ns, names, openshellv1alpha1.SandboxPhaseReady); err != nil {
		return nil, err
	}
	for round := range attackRounds {
		if err := requeueNamespace(ctx, c, st, ns, round, len(names)); err != nil {
			return nil, err
		}
	}
	return footprint(cluster, st, fmt.Sprintf("after %d Ready sandboxes each naming a tiny key of %d padded Secrets, re-queued %d times",
		len(names), sandboxspec.MaxEnvSecrets, attackRounds),
		fmt.Sprintf("%d Secrets with a 1-byte key beside %d KiB of padding", attackSecrets, attackSecretBytes>>10))
}

// requeueNamespace changes a label of namespace ns and waits until the
// sandbox controller has run at least n more reconciles.
func requeueNamespace(ctx context.Context, c client.Client, st *stack.Stack, ns string, round, n int) error {
	before, err := st.Reconciles()
	if err != nil {
		return err
	}
	nsObj := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		return err
	}
	patch := client.MergeFrom(nsObj.DeepCopy())
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["bench-round"] = fmt.Sprint(round)
	if err := c.Patch(ctx, nsObj, patch); err != nil {
		return fmt.Errorf("re-queue namespace %s: %w", ns, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return framework.WaitFor(wctx, 200*time.Millisecond, func(context.Context) (bool, error) {
		after, err := st.Reconciles()
		if err != nil {
			return false, err
		}
		return after["openshellsandbox"].Count-before["openshellsandbox"].Count >= n, nil
	})
}

// waitPhase waits until every named sandbox of ns reports phase.
func waitPhase(ctx context.Context, c client.Client, ns string, names []string, phase openshellv1alpha1.SandboxPhase) error {
	return waitAll(ctx, c, ns, names, func(sb *openshellv1alpha1.OpenShellSandbox) bool { return sb.Status.Phase == phase })
}

// waitAll waits, for at most two minutes, until done holds for every named
// sandbox of ns.
func waitAll(ctx context.Context, c client.Client, ns string, names []string, done func(*openshellv1alpha1.OpenShellSandbox) bool) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return framework.WaitFor(wctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			sb := &openshellv1alpha1.OpenShellSandbox{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, sb); err != nil {
				return false, err
			}
			if !done(sb) {
				return false, nil
			}
		}
		return true, nil
	})
}

func createAttackSecrets(ctx context.Context, c client.Client, ns string) error {
	blob := []byte(strings.Repeat("s", attackSecretBytes))
	if err := inParallel(attackSecrets, 4, func(i int) error {
		return c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i), Namespace: ns},
			Data: map[string][]byte{"v": blob}})
	}); err != nil {
		return fmt.Errorf("create the tenant's Secrets: %w", err)
	}
	return nil
}

func attackSandbox(st *stack.Stack, ns string, i, secrets int) *openshellv1alpha1.OpenShellSandbox {
	sb := &openshellv1alpha1.OpenShellSandbox{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("greedy-%d", i), Namespace: ns},
		Spec: openshellv1alpha1.OpenShellSandboxSpec{
			GatewayRef: openshellv1alpha1.GatewayReference{Name: st.GatewayObj.Name, Namespace: st.GatewayObj.Namespace},
			PolicyRef:  &openshellv1alpha1.LocalObjectReference{Name: benchPolicy}}}
	for j := range secrets {
		sb.Spec.Env = append(sb.Spec.Env, openshellv1alpha1.SandboxEnvVar{Name: fmt.Sprintf("V%d", j),
			ValueFrom: &openshellv1alpha1.SandboxEnvVarSource{SecretKeyRef: openshellv1alpha1.SecretKeyReference{
				Name: fmt.Sprintf("big-%d", (i+j)%attackSecrets), Key: "v"}}})
	}
	return sb
}

// waitRefused waits until the operator has refused every sandbox (env too
// large): the reads the attack wanted have all been attempted.
func waitRefused(ctx context.Context, c client.Client, ns string, names []string) error {
	return waitAll(ctx, c, ns, names, func(sb *openshellv1alpha1.OpenShellSandbox) bool {
		cond := meta.FindStatusCondition(sb.Status.Conditions, openshellv1alpha1.ConditionReady)
		return cond != nil && cond.Reason == openshellv1alpha1.SandboxReasonEnvTooLarge
	})
}
