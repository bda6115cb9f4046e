#!/usr/bin/env bash
# Try gpu-scheduler on kind (needs Docker, kind >= 0.24 and kubectl; see docs/operations.md,
# "Try it on kind"). Idempotent: a second run reuses the cluster and rebuilds the images.
#   1. creates the kind cluster "${KIND_CLUSTER:-gpu-scheduler}" (cluster.yaml) unless it exists;
#   2. builds gpu-scheduler.local/gpu-scheduler:dev from the Dockerfile and the fake
#      dcgm-exporter image on top of it (fake-dcgm.Dockerfile), and loads both into the nodes;
#   3. installs kwok's controller from its release manifests (KWOK_VERSION of hack/versions.env)
#      and the kwok fake GPU nodes of nodes.yaml;
#   4. applies manifests/ through the kustomization here (Prometheus and the fake exporter
#      included) and waits until every Deployment is available.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../versions.env
source "$root/hack/versions.env"

cluster="${KIND_CLUSTER:-gpu-scheduler}"
image="gpu-scheduler.local/gpu-scheduler:dev"
exporter_image="gpu-scheduler.local/fake-dcgm-exporter:dev"
kwok_release="https://github.com/kubernetes-sigs/kwok/releases/download/${KWOK_VERSION}"
log() { printf '[kind %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { log "$tool is required"; exit 1; }
done
kube=(kubectl --context "kind-$cluster")

if kind get clusters | grep -qx "$cluster"; then
  log "reusing the kind cluster $cluster"
else
  log "creating the kind cluster $cluster"
  kind create cluster --name "$cluster" --config "$here/cluster.yaml" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi

log "building $image and $exporter_image"
docker build --tag "$image" "$root"
docker build --tag "$exporter_image" --build-arg "SCHEDULER_IMAGE=$image" \
  --file "$here/fake-dcgm.Dockerfile" "$root"
kind load docker-image --name "$cluster" "$image" "$exporter_image"

log "installing kwok ${KWOK_VERSION} and the fake GPU nodes"
"${kube[@]}" apply -f "$kwok_release/kwok.yaml"
"${kube[@]}" apply -f "$kwok_release/stage-fast.yaml"
"${kube[@]}" -n kube-system rollout status deployment/kwok-controller --timeout=180s
"${kube[@]}" apply -f "$here/nodes.yaml"

log "applying manifests/ with Prometheus and the fake dcgm-exporter"
"${kube[@]}" apply -k "$here"
for deployment in gpu-scheduler/gpu-scheduler monitoring/prometheus monitoring/fake-dcgm-exporter; do
  "${kube[@]}" -n "${deployment%%/*}" rollout status "deployment/${deployment#*/}" --timeout=300s
done
"${kube[@]}" get nodes
log "ready: kubectl config use-context kind-$cluster; try kubectl apply -f manifests/examples/workloads.yaml"
log "remove it with: kind delete cluster --name $cluster"
