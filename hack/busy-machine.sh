#!/usr/bin/env bash
# A developer's busy machine, to run `make test` beside (issue #44): `make
# demo` left running (a second local control plane, operator and gateway)
# and a sandbox created in it every few seconds, the oldest deleted past
# KEEP so that the load stays steady. Stops by itself after MAX_SECONDS, or
# on Ctrl-C; everything it started goes with it.
#
#   hack/busy-machine.sh &   # then, in the same or another shell:
#   make test
set -euo pipefail
cd "$(dirname "$0")/.."
EVERY=${EVERY:-3}          # seconds between creates
KEEP=${KEEP:-20}           # sandboxes kept at once
MAX_SECONDS=${MAX_SECONDS:-7200}
log=${BUSY_LOG:-bin/busy-machine.log}
mkdir -p bin
: >"$log"

setsid make demo >>"$log" 2>&1 &
demo=$!
trap 'kill -TERM -- -$demo 2>/dev/null; wait $demo 2>/dev/null' EXIT
until grep -q '^Demo ready' "$log"; do
	kill -0 "$demo" 2>/dev/null || { echo "make demo ended before it was ready:"; tail -20 "$log"; exit 1; }
	sleep 2
done
export KUBECONFIG=$(sed -n 's/^ *export KUBECONFIG=//p' "$log" | head -1)
echo "busy-machine: demo ready ($KUBECONFIG); a sandbox every ${EVERY}s, ${KEEP} kept, for ${MAX_SECONDS}s"
start=$SECONDS
i=0
while (( SECONDS - start < MAX_SECONDS )); do
	i=$((i + 1))
	bin/kubectl -n team-a apply -f - >/dev/null <<YAML || echo "busy-machine: create $i failed"
apiVersion: openshell.ai/v1alpha1
kind: OpenShellSandbox
metadata:
  name: busy-$i
spec:
  gatewayRef: {name: openshell, namespace: openshell-system}
  policyRef: {name: restricted}
  image: ghcr.io/nvidia/openshell-community/sandboxes/base:0.0.111
  command: [sleep, infinity]
YAML
	if (( i > KEEP )); then
		bin/kubectl -n team-a delete openshellsandbox "busy-$((i - KEEP))" --wait=false >/dev/null 2>&1 || true
	fi
	sleep "$EVERY"
done
